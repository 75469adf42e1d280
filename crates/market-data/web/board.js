// The quote board: logs in over the distributor's WebSocket JSON API (the page's own host and
// port), opens a watchlist, and updates one row per item as refreshes and updates arrive. The
// query string may fill the form and open at once: ?user=alice&token=...&items=AAA.O,BBB.O.
"use strict";

const COLUMNS = ["BID", "ASK", "BIDSIZE", "ASKSIZE", "TRDPRC_1"];
const rows = new Map(); // item -> {tr, cells, updates}
const byStream = new Map(); // stream ID -> item name
let ws = null;

function setState(state, detail) {
  const el = document.getElementById("state");
  el.textContent = state;
  el.className = state;
  document.getElementById("detail").textContent = detail || "";
}

function row(item) {
  let r = rows.get(item);
  if (r) return r;
  const tr = document.createElement("tr");
  tr.dataset.item = item;
  const name = document.createElement("td");
  name.textContent = item;
  tr.appendChild(name);
  const cells = {};
  for (const c of COLUMNS) {
    const td = document.createElement("td");
    td.dataset.field = c;
    tr.appendChild(td);
    cells[c] = td;
  }
  const updates = document.createElement("td");
  updates.className = "updates";
  updates.textContent = "0";
  tr.appendChild(updates);
  const status = document.createElement("td");
  status.className = "status";
  tr.appendChild(status);
  document.getElementById("rows").appendChild(tr);
  r = { tr, cells, updates, status, count: 0 };
  rows.set(item, r);
  return r;
}

function show(r, fields, highlight) {
  for (const [name, value] of Object.entries(fields || {})) {
    const td = r.cells[name];
    if (!td) continue;
    const old = parseFloat(td.textContent);
    td.textContent = value;
    if (highlight && !isNaN(old) && value !== old) {
      td.classList.remove("fade", "up", "down");
      td.classList.add(value > old ? "up" : "down");
      // Fade back once shown.
      requestAnimationFrame(() => requestAnimationFrame(() => {
        td.classList.add("fade");
        td.classList.remove("up", "down");
      }));
    }
  }
}

function onMessage(m) {
  switch (m.Type) {
    case "Ping":
      ws.send(JSON.stringify({ Type: "Pong" }));
      return;
    case "Error":
      setState("disconnected", m.Text);
      return;
    case "Refresh":
      if (m.Domain === "Login") {
        setState("connected", "logged in as " + m.Key.Name);
        openWatchlist();
        return;
      }
      if (m.Key && m.Key.Name) byStream.set(m.ID, m.Key.Name);
      {
        const r = row(m.Key.Name);
        r.tr.classList.remove("suspect");
        r.status.textContent = "";
        show(r, m.Fields, false);
      }
      return;
    case "Update": {
      const item = byStream.get(m.ID);
      if (!item) return;
      const r = row(item);
      r.count += 1;
      r.updates.textContent = String(r.count);
      show(r, m.Fields, true);
      return;
    }
    case "Status": {
      if (m.Domain === "Login") {
        setState("refused", m.State && m.State.Text);
        return;
      }
      const item = byStream.get(m.ID) || pending.get(m.ID);
      if (!item) return;
      const r = row(item);
      const st = m.State || {};
      r.status.textContent = [st.Code, st.Text].filter(Boolean).join(": ") || st.Data;
      r.tr.classList.toggle("suspect", st.Data !== "Ok");
      return;
    }
  }
}

const pending = new Map(); // stream ID -> item asked for (a Status may come before any Refresh)
let watchlist = [];
let service = "FEED1";

function openWatchlist() {
  let id = 2;
  for (const item of watchlist) {
    pending.set(id, item);
    row(item);
    ws.send(JSON.stringify({ ID: id, Key: { Service: service, Name: item } }));
    id += 1;
  }
}

function connect(user, token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(scheme + "//" + location.host + "/ws");
  setState("connecting");
  ws.onopen = () => {
    ws.send(JSON.stringify({
      ID: 1, Domain: "Login",
      Key: { Name: user, Elements: { AuthenticationToken: token } },
    }));
  };
  ws.onmessage = (e) => {
    const data = JSON.parse(e.data);
    for (const m of Array.isArray(data) ? data : [data]) onMessage(m);
  };
  ws.onclose = () => {
    const el = document.getElementById("state");
    if (el.className !== "refused") setState("disconnected", "the connection closed");
    for (const r of rows.values()) r.tr.classList.add("suspect");
  };
}

function start(user, token, svc, items) {
  service = svc || "FEED1";
  watchlist = items.split(",").map((s) => s.trim()).filter(Boolean);
  connect(user, token);
}

document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault();
  start(
    document.getElementById("user").value,
    document.getElementById("token").value,
    document.getElementById("service").value,
    document.getElementById("items").value,
  );
});

const q = new URLSearchParams(location.search);
if (q.get("user") && q.get("token") && q.get("items")) {
  document.getElementById("user").value = q.get("user");
  document.getElementById("items").value = q.get("items");
  if (q.get("service")) document.getElementById("service").value = q.get("service");
  start(q.get("user"), q.get("token"), q.get("service"), q.get("items"));
} else {
  setState("idle", "fill in the form to log in");
}

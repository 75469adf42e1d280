//! Attacks run beside a fan-out probe (`peregrine bench fanout --attack KIND`), from a thread
//! of the bench process against the distributor, while the clients measure: what an honest
//! client's throughput and latency keep under each attack is the ratio to a run without one.
//!
//! - `logins`: a brute force, LOGIN after LOGIN with wrong tokens for the bench's user, each on
//!   a new connection (the distributor throttles them; the user's own clients are logged in
//!   already);
//! - `slots`: connections that never log in, opened as fast as the distributor takes them and
//!   held (it closes the oldest past `max_pending_clients`);
//! - `globs`: a logged-in connection sending OPENs of 1,000 distinct globs (past
//!   `max_globs_per_client`), each refused before any is matched, as fast as the answers come
//!   back.

use peregrine_md::codec::{LoginRepr, Message, OpenRepr, PatternList};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An attack on the distributor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attack {
    Logins,
    Slots,
    Globs,
}

impl Attack {
    pub const ALL: [Attack; 3] = [Attack::Logins, Attack::Slots, Attack::Globs];

    pub fn name(self) -> &'static str {
        match self {
            Attack::Logins => "logins",
            Attack::Slots => "slots",
            Attack::Globs => "globs",
        }
    }

    pub fn from_name(s: &str) -> Option<Attack> {
        Attack::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// A running attack: stopped (and its thread joined) on drop; `sent` counts its attempts.
#[derive(Debug)]
pub struct Attacker {
    stop: Arc<AtomicBool>,
    pub sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attacker {
    pub fn start(kind: Attack, addr: &str, user: &str, token: &str) -> Attacker {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (addr, user, token) = (addr.to_string(), user.to_string(), token.to_string());
        let thread = {
            let (stop, sent) = (stop.clone(), sent.clone());
            std::thread::spawn(move || match kind {
                Attack::Logins => logins(&addr, &user, &stop, &sent),
                Attack::Slots => slots(&addr, &stop, &sent),
                Attack::Globs => globs(&addr, &user, &token, &stop, &sent),
            })
        };
        Attacker {
            stop,
            sent,
            thread: Some(thread),
        }
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bytes(m: Message<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    m.emit_to_vec(&mut b);
    b
}

fn connect(addr: &str) -> Option<TcpStream> {
    let s = TcpStream::connect(addr).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    Some(s)
}

/// Reads whatever answer comes (or the timeout): the attacker goes at the distributor's pace.
fn read_some(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf);
}

fn logins(addr: &str, user: &str, stop: &AtomicBool, sent: &AtomicU64) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(mut s) = connect(addr) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let token = format!("guess-{n}");
        n += 1;
        let login = bytes(Message::Login(LoginRepr::new(user, token.as_bytes())));
        if s.write_all(&login).is_ok() {
            sent.fetch_add(1, Ordering::Relaxed);
            read_some(&mut s);
        }
    }
}

fn slots(addr: &str, stop: &AtomicBool, sent: &AtomicU64) {
    let mut held = std::collections::VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        match connect(addr) {
            Some(s) => {
                sent.fetch_add(1, Ordering::Relaxed);
                held.push_back(s);
                // Hold at most 2,000: the distributor closes the oldest past its pending
                // slots anyway.
                if held.len() > 2000 {
                    held.pop_front();
                }
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

fn globs(addr: &str, user: &str, token: &str, stop: &AtomicBool, sent: &AtomicU64) {
    let patterns: Vec<String> = (0..1_000).map(|i| format!("*{i}*")).collect();
    let refs: Vec<&str> = patterns.iter().map(String::as_str).collect();
    let mut request_id = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let Some(mut s) = connect(addr) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let login = bytes(Message::Login(LoginRepr::new(user, token.as_bytes())));
        if s.write_all(&login).is_err() {
            continue;
        }
        read_some(&mut s);
        while !stop.load(Ordering::Relaxed) {
            request_id = request_id.wrapping_add(1).max(1);
            let open = bytes(Message::Open(OpenRepr {
                flags: 0,
                request_id,
                service: "FEED1",
                patterns: PatternList::List(&refs),
                view: None,
            }));
            if s.write_all(&open).is_err() {
                break;
            }
            sent.fetch_add(1, Ordering::Relaxed);
            read_some(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attack_has_one_name() {
        for a in Attack::ALL {
            assert_eq!(Attack::from_name(a.name()), Some(a));
        }
        assert_eq!(Attack::from_name("tls"), None);
    }
}

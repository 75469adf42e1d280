//! The distributor's WebSocket endpoint (`--websocket ADDR`): one client connection's layer
//! between its socket (plaintext, or TLS under the same certificate as the binary listener)
//! and the core, which sees the client as any other.
//!
//! - The HTTP request is read first (8 KiB at most). A WebSocket upgrade (RFC 6455: `GET`,
//!   `Upgrade: websocket`, `Connection: Upgrade`, `Sec-WebSocket-Version: 13`, a
//!   `Sec-WebSocket-Key`) is answered `101 Switching Protocols`; any other `GET` of `/` or
//!   `/board.js` is answered with the live quote board, shipped in the binary (`web/`), and
//!   the connection closed; anything else gets a `400` or `404` naming what is wrong, and
//!   closed.
//! - Frames are read and written by tungstenite's `WebSocketContext` (a well-kept
//!   implementation of RFC 6455: masking, fragments, control frames, limits) over a [`Pipe`]:
//!   the layer is fed the socket's bytes and hands back bytes for the socket, so no socket is
//!   read or written here. Text frames carry JSON messages ([`peregrine_md::json`]); a binary
//!   frame, malformed JSON or a frame over 64 KiB is answered `{"Type":"Error","Text":...}`
//!   and the connection closed.

use peregrine_md::json::{JsonError, JsonSession};
use std::io::{self, Read, Write};
use tungstenite::protocol::{
    frame::coding::CloseCode, CloseFrame, Role, WebSocketConfig, WebSocketContext,
};
use tungstenite::Message as WsMessage;

/// The longest HTTP request head read before an upgrade.
pub const MAX_HEAD: usize = 8 << 10;
/// The longest message a client may send (and the longest frame).
pub const MAX_MESSAGE: usize = 64 << 10;

/// The live quote board's page and script.
const BOARD_HTML: &str = include_str!("../../web/board.html");
const BOARD_JS: &str = include_str!("../../web/board.js");

/// Bytes in from the socket and out to it, for tungstenite: reading an empty pipe is
/// `WouldBlock`, so the context parses what it was given and waits for more.
#[derive(Debug, Default)]
pub struct Pipe {
    input: Vec<u8>,
    read_at: usize,
    output: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = &self.input[self.read_at..];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.len().min(buf.len());
        buf[..n].copy_from_slice(&left[..n]);
        self.read_at += n;
        if self.read_at == self.input.len() {
            self.input.clear();
            self.read_at = 0;
        }
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Debug)]
enum Phase {
    /// Reading the HTTP request head.
    Head(Vec<u8>),
    Open(Box<WebSocketContext>),
    /// Answered and closing: what comes is discarded.
    Closing,
}

/// What the driver does after [`WsLayer::input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Keep the connection.
    Continue,
    /// Write what was handed back, then close (an HTTP answer, an error, a close frame).
    Close,
}

/// One WebSocket client's layer: see the module's documentation.
#[derive(Debug)]
pub struct WsLayer {
    phase: Phase,
    pipe: Pipe,
    session: JsonSession,
    /// JSON of one core message, reused.
    json: String,
}

impl WsLayer {
    pub fn new(session: JsonSession) -> WsLayer {
        WsLayer {
            phase: Phase::Head(Vec::new()),
            pipe: Pipe::default(),
            session,
            json: String::new(),
        }
    }

    /// Bytes read from the socket: the binary messages they make for the core go to
    /// `to_core`, bytes for the socket (the upgrade's answer, pongs, an error) to `to_socket`.
    pub fn input(&mut self, bytes: &[u8], to_core: &mut Vec<u8>, to_socket: &mut Vec<u8>) -> Step {
        let step = match &mut self.phase {
            Phase::Closing => Step::Close,
            Phase::Head(head) => {
                head.extend_from_slice(bytes);
                match upgrade(head) {
                    Head::Partial if head.len() > MAX_HEAD => {
                        http_answer(
                            to_socket,
                            "431 Request Header Fields Too Large",
                            "text/plain",
                            b"the request head is over 8 KiB\n",
                        );
                        Step::Close
                    }
                    Head::Partial => Step::Continue,
                    Head::Answer(status, kind, body) => {
                        http_answer(to_socket, status, kind, body.as_bytes());
                        Step::Close
                    }
                    Head::Upgrade { accept, used } => {
                        to_socket.extend_from_slice(
                            format!(
                                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                            )
                            .as_bytes(),
                        );
                        let rest = head.split_off(used);
                        let mut config = WebSocketConfig::default();
                        config.max_message_size = Some(MAX_MESSAGE);
                        config.max_frame_size = Some(MAX_MESSAGE);
                        self.phase = Phase::Open(Box::new(WebSocketContext::new(
                            Role::Server,
                            Some(config),
                        )));
                        self.pipe.input.extend_from_slice(&rest);
                        self.frames(to_core)
                    }
                }
            }
            Phase::Open(_) => {
                self.pipe.input.extend_from_slice(bytes);
                self.frames(to_core)
            }
        };
        to_socket.append(&mut self.pipe.output);
        if step == Step::Close {
            self.phase = Phase::Closing;
        }
        step
    }

    /// Reads every whole frame the pipe holds.
    fn frames(&mut self, to_core: &mut Vec<u8>) -> Step {
        loop {
            let Phase::Open(ctx) = &mut self.phase else {
                return Step::Close;
            };
            match ctx.read(&mut self.pipe) {
                Ok(WsMessage::Text(text)) => {
                    if let Err(e) = self.session.from_client(text.as_str(), to_core) {
                        return self.fail(&e);
                    }
                }
                Ok(WsMessage::Binary(_)) => {
                    return self.fail(&JsonError(
                        "a binary frame: send JSON messages in text frames".into(),
                    ))
                }
                // Pings are answered by the context (queued, written on the next flush).
                Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_)) => {}
                Ok(WsMessage::Close(_)) => {
                    let _ = ctx.flush(&mut self.pipe);
                    return Step::Close;
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    let _ = ctx.flush(&mut self.pipe);
                    return Step::Continue;
                }
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return Step::Close
                }
                Err(e) => return self.fail(&JsonError(format!("WebSocket: {e}"))),
            }
        }
    }

    /// Answers `{"Type":"Error"}` and a close frame.
    fn fail(&mut self, e: &JsonError) -> Step {
        if let Phase::Open(ctx) = &mut self.phase {
            let text = serde_json::json!({"Type": "Error", "Text": e.to_string()}).to_string();
            let _ = ctx.write(&mut self.pipe, WsMessage::text(text));
            let _ = ctx.close(
                &mut self.pipe,
                Some(CloseFrame {
                    code: CloseCode::Policy,
                    reason: "protocol error".into(),
                }),
            );
            let _ = ctx.flush(&mut self.pipe);
        }
        Step::Close
    }

    /// Bytes the core queued for this client (whole messages): each becomes a JSON text frame
    /// appended to `to_socket`. `shared[i]`: the `i`th message's JSON as made for the other
    /// clients of the same bytes (made here for the first one).
    pub fn output(
        &mut self,
        bytes: &[u8],
        shared: &mut [peregrine_md::json::Shared],
        to_socket: &mut Vec<u8>,
    ) {
        if !matches!(self.phase, Phase::Open(_)) {
            return;
        }
        for (i, m) in peregrine_md::json::messages(bytes).enumerate() {
            self.json.clear();
            if self.session.to_client(m, shared.get_mut(i), &mut self.json) == 0 {
                continue;
            }
            text_frame(self.json.as_bytes(), to_socket);
        }
    }

    /// A close frame, for a connection the core is closing.
    pub fn close(&mut self, to_socket: &mut Vec<u8>) {
        if let Phase::Open(ctx) = &mut self.phase {
            let _ = ctx.close(&mut self.pipe, None);
            let _ = ctx.flush(&mut self.pipe);
            to_socket.append(&mut self.pipe.output);
        }
        self.phase = Phase::Closing;
    }
}

enum Head {
    Partial,
    Answer(&'static str, &'static str, String),
    Upgrade { accept: String, used: usize },
}

/// Parses the request head in `head`.
fn upgrade(head: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let used = match req.parse(head) {
        Ok(httparse::Status::Partial) => return Head::Partial,
        Ok(httparse::Status::Complete(n)) => n,
        Err(e) => {
            return Head::Answer(
                "400 Bad Request",
                "text/plain",
                format!("not an HTTP request: {e}\n"),
            )
        }
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    if req.method != Some("GET") {
        return Head::Answer(
            "405 Method Not Allowed",
            "text/plain",
            "only GET: the page, or a WebSocket upgrade\n".into(),
        );
    }
    let wants_ws = header("Upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    if !wants_ws {
        let path = req.path.unwrap_or("/");
        return match path.split('?').next().unwrap_or("/") {
            "/" | "/board.html" => {
                Head::Answer("200 OK", "text/html; charset=utf-8", BOARD_HTML.into())
            }
            "/board.js" => {
                Head::Answer("200 OK", "text/javascript; charset=utf-8", BOARD_JS.into())
            }
            other => Head::Answer(
                "404 Not Found",
                "text/plain",
                format!("{other}: this server has / (the quote board) and WebSocket upgrades\n"),
            ),
        };
    }
    let connection_upgrade = header("Connection").is_some_and(|c| {
        c.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    });
    if !connection_upgrade {
        return Head::Answer(
            "400 Bad Request",
            "text/plain",
            "a WebSocket upgrade needs Connection: Upgrade\n".into(),
        );
    }
    if header("Sec-WebSocket-Version") != Some("13") {
        return Head::Answer(
            "400 Bad Request",
            "text/plain",
            "a WebSocket upgrade needs Sec-WebSocket-Version: 13 (RFC 6455)\n".into(),
        );
    }
    let Some(key) = header("Sec-WebSocket-Key").filter(|k| k.len() == 24) else {
        return Head::Answer(
            "400 Bad Request",
            "text/plain",
            "a WebSocket upgrade needs a Sec-WebSocket-Key of 16 bytes in base64\n".into(),
        );
    };
    Head::Upgrade {
        accept: tungstenite::handshake::derive_accept_key(key.as_bytes()),
        used,
    }
}

/// Appends a server's text frame of `payload` (FIN, opcode 1, unmasked: RFC 6455 5.2). Written
/// here rather than through tungstenite's context: this is every update to every WebSocket
/// client, and the context would copy each message three times (into a `Message`, its write
/// buffer, then the pipe) where this copies it once, into the connection's queue. Reading
/// (masking, fragments, control frames, limits) stays with tungstenite; its pongs reach the
/// queue between whole frames, so the stream stays well formed.
pub fn text_frame(payload: &[u8], out: &mut Vec<u8>) {
    let n = payload.len();
    out.push(0x81);
    if n < 126 {
        out.push(n as u8);
    } else if n <= usize::from(u16::MAX) {
        out.push(126);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

fn http_answer(out: &mut Vec<u8>, status: &str, kind: &str, body: &[u8]) {
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_md::dictionary::Dictionary;
    use std::sync::Arc;

    fn layer() -> WsLayer {
        WsLayer::new(JsonSession::new(Arc::new(Dictionary::builtin()), "FEED1"))
    }

    const UPGRADE: &str =
        "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

    /// A masked text frame, as a client sends (RFC 6455 5.2).
    fn client_text(text: &str) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x81];
        let n = text.len();
        if n < 126 {
            f.push(0x80 | n as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[test]
    fn an_upgrade_is_answered_with_the_rfc_accept_key_then_frames_become_messages() {
        let mut l = layer();
        let (mut core, mut sock) = (Vec::new(), Vec::new());
        // The head in two pieces, and a frame right behind it.
        let mut bytes = UPGRADE.as_bytes().to_vec();
        bytes.extend(client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"alice","Elements":{"AuthenticationToken":"a"}}}"#,
        ));
        assert_eq!(l.input(&bytes[..20], &mut core, &mut sock), Step::Continue);
        assert!(sock.is_empty());
        assert_eq!(l.input(&bytes[20..], &mut core, &mut sock), Step::Continue);
        let answer = String::from_utf8(sock).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{answer}"
        );
        // RFC 6455 section 1.3's example key and answer.
        assert!(answer.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert_eq!(core[2], 0x10, "a LOGIN for the core");
    }

    #[test]
    fn bad_upgrades_get_an_answer_naming_the_header_and_a_close() {
        for (head, want) in [
            ("GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", "Sec-WebSocket-Version: 13"),
            ("GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n", "Connection: Upgrade"),
            ("GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", "Sec-WebSocket-Key"),
            ("POST / HTTP/1.1\r\n\r\n", "only GET"),
            ("GET /nope HTTP/1.1\r\n\r\n", "404"),
            ("\x16\x03\x01 not http\r\n\r\n", "400"),
        ] {
            let mut l = layer();
            let (mut core, mut sock) = (Vec::new(), Vec::new());
            assert_eq!(l.input(head.as_bytes(), &mut core, &mut sock), Step::Close, "{head}");
            let answer = String::from_utf8_lossy(&sock).to_string();
            assert!(answer.contains(want), "{head}: {answer}");
            assert!(core.is_empty());
        }
        let mut l = layer();
        let (mut core, mut sock) = (Vec::new(), Vec::new());
        assert_eq!(
            l.input(&vec![b'a'; MAX_HEAD + 1], &mut core, &mut sock),
            Step::Close
        );
        assert!(String::from_utf8_lossy(&sock).contains("431"));
        // The page.
        let mut l = layer();
        let mut sock = Vec::new();
        l.input(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", &mut core, &mut sock);
        let page = String::from_utf8_lossy(&sock);
        assert!(
            page.starts_with("HTTP/1.1 200 OK") && page.contains("board.js"),
            "{page}"
        );
    }

    #[test]
    fn server_text_frames_are_what_tungstenite_reads() {
        for n in [0, 125, 126, 65_535, 65_536, 70_000] {
            let text = "y".repeat(n);
            let mut pipe = Pipe::default();
            text_frame(text.as_bytes(), &mut pipe.input);
            let mut client = WebSocketContext::new(Role::Client, None);
            client.set_config(|c| c.max_message_size = None);
            client.set_config(|c| c.max_frame_size = None);
            match client.read(&mut pipe).unwrap() {
                WsMessage::Text(t) => assert_eq!(t.as_str(), text, "{n}"),
                other => panic!("{n}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_json_or_a_binary_frame_is_an_error_message_and_a_close() {
        let mut l = layer();
        let (mut core, mut sock) = (Vec::new(), Vec::new());
        l.input(UPGRADE.as_bytes(), &mut core, &mut sock);
        sock.clear();
        assert_eq!(
            l.input(&client_text("{nope"), &mut core, &mut sock),
            Step::Close
        );
        // An unmasked server text frame then a close frame (0x88).
        assert_eq!(sock[0], 0x81);
        let text = String::from_utf8_lossy(&sock);
        assert!(
            text.contains("\"Type\":\"Error\"") && text.contains("not JSON"),
            "{text}"
        );
        assert!(sock.windows(1).any(|w| w[0] == 0x88), "a close frame");
        assert!(core.is_empty());
    }
}

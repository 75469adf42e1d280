//! Logins: a LOGIN checked against the users file (the slow token hash off the event loop,
//! as a [`Verification`]), throttled per address and per user, answered, and a refused
//! client closed after its answer.

use super::cache::{encode_status, truncate};
use super::client::{ClientId, Liveness, Login};
use super::entitle::LoginCheck;
use super::errors::{ClientError, Event};
use super::{DisconnectReason, Distributor};
use crate::codec::{LoginResponseRepr, LoginResponseView, LoginResult, StatusRepr};
use crate::model::ItemState;
use std::sync::Arc;

/// A token to check against a slow hash, off the event loop: [`entitle::verify_token`](super::entitle::verify_token)`(hash,
/// token)`, answered with [`Distributor::verification_done`].
pub struct Verification {
    pub client: ClientId,
    pub hash: Arc<str>,
    pub token: Vec<u8>,
}

/// Never prints the token.
impl std::fmt::Debug for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verification")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Distributor {
    pub(super) fn on_login(&mut self, id: ClientId, user_name: &str, token: &[u8], now_ns: u64) {
        let Some(c) = self.clients.get_mut(id) else {
            return;
        };
        c.login_name = Some(user_name.into());
        let c = &*c;
        let link = c.link;
        if !link.tls && !link.peer.is_loopback() && !self.config.allow_plaintext_logins {
            return self.refuse_client(id, ClientError::PlaintextLogin);
        }
        if let Some(wait) = self.throttle.wait_ns(link.peer, user_name, now_ns) {
            self.counters.logins_throttled += 1;
            return self.refuse_client(
                id,
                ClientError::Throttled {
                    retry_ms: wait.div_ceil(1_000_000),
                },
            );
        }
        let subject = c.cert_subject.as_deref();
        let user = match self.users.login(user_name, token, subject) {
            LoginCheck::Accepted(user) => user,
            LoginCheck::Denied => return self.login_failed(id, now_ns),
            LoginCheck::Verify { user, hash } => {
                // A slow hash: checked off the driver's loop; what the client sends meanwhile
                // waits (`handle_client_bytes`).
                if let Some(c) = self.clients.get_mut(id) {
                    c.login = Login::Verifying {
                        since_ns: now_ns,
                        user,
                    };
                }
                self.verifications.push_back(Verification {
                    client: id,
                    hash,
                    token: token.to_vec(),
                });
                return;
            }
        };
        self.login_succeeded(id, user, now_ns);
    }

    /// The result of a [`Verification`] the driver ran: the client logs in, or is refused as
    /// a wrong token is; then what it sent after its LOGIN is read.
    pub fn verification_done(&mut self, client: ClientId, matched: bool, now_ns: u64) {
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        let Login::Verifying { since_ns, user } = c.login else {
            return;
        };
        // Back to waiting for the answer: a refusal below closes it, a login moves it on.
        c.login = Login::Awaiting { since_ns };
        match (matched, user) {
            (true, Some(user)) => self.login_succeeded(client, user, now_ns),
            _ => self.login_failed(client, now_ns),
        }
        self.reap();
        if self.clients.get(client).is_some_and(|c| !c.closing()) {
            self.handle_client_bytes(client, &[], now_ns);
        }
    }

    /// Slow token checks to run off the event loop ([`entitle::verify_token`](super::entitle::verify_token)), each answered
    /// with [`verification_done`](Self::verification_done).
    pub fn poll_verification(&mut self) -> Option<Verification> {
        self.verifications.pop_front()
    }

    pub(super) fn login_failed(&mut self, id: ClientId, now_ns: u64) {
        if let Some(c) = self.clients.get(id) {
            let peer = c.link.peer;
            let name = c.login_name.as_deref().unwrap_or("").to_string();
            self.throttle.failed(peer, &name, now_ns);
        }
        self.refuse_client(id, ClientError::BadCredentials);
    }

    pub(super) fn login_succeeded(&mut self, id: ClientId, user: usize, now_ns: u64) {
        let user_name = match self.clients.get(id) {
            Some(c) => c.login_name.as_deref().unwrap_or("").to_string(),
            None => return,
        };
        self.throttle.succeeded(&user_name);
        if self.clients.logged_in >= self.config.max_clients {
            self.counters.clients_refused += 1;
            return self.refuse_client(
                id,
                ClientError::Full {
                    max: self.config.max_clients,
                },
            );
        }
        if self.clients.per_user.get(&user).copied().unwrap_or(0) as usize
            >= self.config.max_clients_per_user
        {
            self.counters.clients_refused += 1;
            return self.refuse_client(
                id,
                ClientError::UserLimit {
                    max: self.config.max_clients_per_user,
                },
            );
        }
        let slow = self
            .users
            .get(user)
            .and_then(|u| u.slow)
            .unwrap_or(self.config.slow);
        self.clients.logged_in(id, user);
        let mut ping_interval_ms = None;
        if let Some(c) = self.clients.get_mut(id) {
            c.login = Login::LoggedIn { user };
            c.slow = slow;
            if c.version >= 2 {
                let ms = self.config.ping_interval_for(c.asked_ping_ms);
                c.liveness = Some(Liveness::new(u64::from(ms) * 1_000_000, now_ns));
                ping_interval_ms = Some(ms);
            }
        }
        self.counters.logins_accepted += 1;
        self.send_login_response_with(id, LoginResult::Accepted, ping_interval_ms, "");
        if ping_interval_ms.is_some() {
            self.send_directory(id, None);
        }
        self.push_event(Event::LoggedIn {
            client: id,
            user: user_name,
        });
    }

    /// Answers a client that broke the protocol and closes it: a LOGIN_RESPONSE before login
    /// (the client waits for one), a STATUS `rejected` after.
    pub(super) fn refuse_client(&mut self, id: ClientId, error: ClientError) {
        let Some(c) = self.clients.get(id) else {
            return;
        };
        if c.closing() {
            return;
        }
        let login_name = c.login_name.as_deref().map(str::to_string);
        let peer = c.link.peer;
        let text = error.to_string();
        if matches!(error, ClientError::Malformed(_)) {
            self.counters.malformed_messages += 1;
        }
        let reason = if c.user().is_some() {
            self.counters.protocol_errors += 1;
            let from = self.outbox.buffer().len();
            encode_status(
                &StatusRepr {
                    item_id: 0,
                    request_id: 0,
                    state: ItemState::Rejected,
                    service: "",
                    name: "",
                    text: truncate(&text, 255),
                },
                self.outbox.buffer(),
            );
            self.queue_control(id, from);
            self.push_event(Event::ProtocolError {
                client: id,
                user: login_name,
                peer,
                error,
            });
            DisconnectReason::Protocol(error)
        } else {
            self.counters.logins_denied += 1;
            let result = match error {
                ClientError::UnsupportedVersion(_) | ClientError::VersionRefused { .. } => {
                    LoginResult::UnsupportedVersion
                }
                _ => LoginResult::Denied,
            };
            self.send_login_response(id, result, &text);
            self.push_event(Event::LoginDenied {
                client: id,
                user: login_name,
                peer,
                error,
            });
            DisconnectReason::LoginDenied(error)
        };
        self.close_client(id, reason);
    }

    pub(super) fn send_login_response(&mut self, id: ClientId, result: LoginResult, text: &str) {
        self.send_login_response_with(id, result, None, text)
    }

    pub(super) fn send_login_response_with(
        &mut self,
        id: ClientId,
        result: LoginResult,
        ping_interval_ms: Option<u32>,
        text: &str,
    ) {
        let repr = LoginResponseRepr {
            result,
            ping_interval_ms,
            text: truncate(text, 255),
        };
        let buf = self.outbox.buffer();
        let from = buf.len();
        buf.resize(from + repr.buffer_len(), 0);
        repr.emit(&mut LoginResponseView::new_unchecked(&mut buf[from..]));
        self.queue_control(id, from);
    }
}

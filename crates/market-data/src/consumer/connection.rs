//! The connection to a distributor: made (with back-off through the list of distributors),
//! read into the session core, written from it, and lost.

use super::error::ConsumerError;
use super::{Consumer, CONNECT_TIMEOUT};
use crate::tls::{read_plain, write_pending};
use peregrine_md::consumer::{ConsumerError as SessionError, Event};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The consumer's socket as rustls reads and writes it: the first read with `flags` (a wait
/// under SO_RCVTIMEO, or none), every later one without waiting; writes never wait.
struct Socket<'a> {
    stream: &'a TcpStream,
    flags: rustix::net::RecvFlags,
}

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let flags = std::mem::replace(&mut self.flags, rustix::net::RecvFlags::DONTWAIT);
        rustix::net::recv(self.stream, buf, flags)
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.stream, buf, rustix::net::SendFlags::DONTWAIT)
            .map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Consumer {
    /// [`poll`](Self::poll) but for the counters.
    pub(super) fn poll_connection(
        &mut self,
        timeout: Duration,
        handler: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, ConsumerError> {
        let events = std::cell::Cell::new(0usize);
        let mut count = |e: Event<'_>| {
            events.set(events.get() + 1);
            handler(e);
        };
        let end = Instant::now() + timeout;
        let mut spin_until: Option<Instant> = None;
        // The first wait of a call blocks in the read itself; later ones in poll(2).
        let mut waited = false;
        let mut read_tried = false;
        loop {
            if self.stream.is_none() {
                if let Some(e) = &self.stopped {
                    return Err(ConsumerError::Session(e.clone()));
                }
                if self.core.is_refused() {
                    return Err(ConsumerError::Session(SessionError::LoginRefused {
                        result: peregrine_md::codec::LoginResult::Denied,
                        text: self.last_error.clone(),
                    }));
                }
                let due = self.core.poll_timeout().unwrap_or(0);
                let now = self.now_ns();
                if now >= due {
                    self.try_connect(&mut count);
                } else {
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() || events.get() > 0 {
                        return Ok(events.get());
                    }
                    std::thread::sleep(Duration::from_nanos(due - now).min(left));
                }
                if events.get() > 0 {
                    return Ok(events.get());
                }
                continue;
            }
            self.check_timers(&mut count);
            if self.stream.is_none() {
                if events.get() > 0 {
                    return Ok(events.get());
                }
                continue;
            }
            if !self.core.transmit().is_empty()
                || self.session.as_ref().is_some_and(|t| t.wants_write())
            {
                self.flush_out();
            }
            // The socket looked empty (a short read, or EAGAIN): hand back what was read, spin
            // (busy-poll), or wait for data. A short read is taken as empty without a failing
            // read to prove it, and the first wait of a call is the read itself, blocking
            // under SO_RCVTIMEO: one system call per wake-up, as a plain blocking reader has
            // (a wrong guess costs nothing: the read returns at once).
            let mut wait = false;
            if self.drained {
                let now = Instant::now();
                let spinning = !self.busy_poll.is_zero()
                    && (events.get() > 0 || spin_until.is_some())
                    && now < *spin_until.get_or_insert(now + self.busy_poll);
                if !spinning {
                    if events.get() > 0 || (now >= end && read_tried) {
                        return Ok(events.get());
                    }
                    if now >= end {
                        // A call with no time left (an event loop's, after the socket turned
                        // readable) still reads once, without waiting.
                    } else if waited {
                        self.wait_readable(self.wait_cap(end - now));
                    } else {
                        wait = true;
                        waited = true;
                    }
                } else {
                    std::hint::spin_loop();
                }
                self.drained = false;
            }
            let cap = self.wait_cap(end.saturating_duration_since(Instant::now()));
            let r = self.read(if wait { Some(cap) } else { None });
            read_tried = true;
            match r {
                Ok(0) => self.lost("the distributor closed the connection", &mut count),
                Ok(n) => {
                    let now = self.now_ns();
                    let result = self.core.handle_bytes(&self.read_buf[..n], now, &mut count);
                    match result {
                        Ok(()) => self.flush_out(),
                        Err(SessionError::LoginRefused { result, text }) => {
                            self.stream = None;
                            self.last_error = text.clone();
                            return Err(SessionError::LoginRefused { result, text }.into());
                        }
                        Err(e @ SessionError::DictionaryMismatch(_)) => {
                            self.stream = None;
                            self.session = None;
                            self.last_error = e.to_string();
                            self.stopped = Some(e.clone());
                            return Err(e.into());
                        }
                        Err(e) => self.lost(&e.to_string(), &mut count),
                    }
                    self.drained = n < self.read_buf.len();
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained = true,
                Err(e) => {
                    // TLS refused: a certificate that does not verify, a refused one of ours.
                    if self.session.is_some() && e.kind() == io::ErrorKind::InvalidData {
                        self.tls_refusals += 1;
                    }
                    self.lost(&e.to_string(), &mut count)
                }
            }
            if self.stream.is_none() && events.get() > 0 {
                return Ok(events.get());
            }
        }
    }

    /// One read: blocking up to `wait` (SO_RCVTIMEO, set only when it changes), or without
    /// waiting (`MSG_DONTWAIT`).
    pub(super) fn read(&mut self, wait: Option<Duration>) -> io::Result<usize> {
        let Some(s) = &self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let flags = match wait {
            Some(t) => {
                // SO_RCVTIMEO of 0 means forever: at least a millisecond.
                let t = t.max(Duration::from_millis(1));
                if self.read_timeout != Some(t) {
                    s.set_read_timeout(Some(t))?;
                    self.read_timeout = Some(t);
                }
                rustix::net::RecvFlags::empty()
            }
            None => rustix::net::RecvFlags::DONTWAIT,
        };
        match &mut self.session {
            None => match rustix::net::recv(s, &mut self.read_buf[..], flags) {
                Ok((n, _)) => Ok(n),
                // SO_RCVTIMEO ran out: as empty as EAGAIN.
                Err(e) => Err(io::Error::from(e)),
            },
            Some(tls) => {
                let mut socket = Socket { stream: s, flags };
                read_plain(tls, &mut socket, &mut self.read_buf)
            }
        }
    }

    /// Sleeps in `poll(2)` until the socket is readable or `timeout` passed.
    pub(super) fn wait_readable(&self, timeout: Duration) {
        let Some(s) = &self.stream else { return };
        let mut fds = [rustix::event::PollFd::new(s, rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }

    pub(super) fn try_connect(&mut self, handler: &mut dyn FnMut(Event<'_>)) {
        let addr = self.addresses[self.core.address()];
        let session = match &self.tls {
            None => Ok(None),
            Some(tls) => tls
                .connect(&self.hosts[self.core.address()])
                .map(|c| Some(rustls::Connection::Client(c))),
        };
        let connected = match session {
            Ok(session) => TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map(|s| (s, session))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match connected {
            Ok((s, session)) => {
                let _ = s.set_nodelay(true);
                self.read_timeout = None;
                self.stream = Some(s);
                self.session = session;
                self.drained = false;
                let now = self.now_ns();
                self.core.connected(now);
                self.flush_out();
            }
            Err(e) => {
                self.last_error = format!("{addr}: {e}");
                let now = self.now_ns();
                let reason = format!("cannot connect to {addr}: {e}");
                self.core.connect_failed(now, &reason, handler);
            }
        }
    }

    pub(super) fn lost(&mut self, reason: &str, handler: &mut dyn FnMut(Event<'_>)) {
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.session = None;
        self.last_error = reason.to_string();
        let now = self.now_ns();
        self.core.connection_lost(now, reason, handler);
    }

    /// Writes what the core queued (LOGIN, OPENs, CLOSEs), as much as the socket takes now;
    /// the rest on the next call. A failed write shows as a lost connection on the next read.
    pub(super) fn flush_out(&mut self) {
        let Some(s) = self.stream.as_mut() else {
            return;
        };
        if let Some(tls) = &mut self.session {
            // What the core queued is small (LOGIN, OPENs, CLOSEs): rustls takes it whole and
            // holds its records until the socket does.
            let out = self.core.transmit();
            if !out.is_empty() {
                let n = tls.writer().write(out).unwrap_or(0);
                self.core.transmitted(n);
            }
            let mut socket = Socket {
                stream: s,
                flags: rustix::net::RecvFlags::DONTWAIT,
            };
            if let Err(e) = write_pending(tls, &mut socket) {
                if e.kind() != io::ErrorKind::WouldBlock {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
            return;
        }
        loop {
            let out = self.core.transmit();
            if out.is_empty() {
                return;
            }
            match rustix::net::send(&*s, out, rustix::net::SendFlags::DONTWAIT)
                .map_err(io::Error::from)
            {
                Ok(0) => return,
                Ok(n) => self.core.transmitted(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
        }
    }
}

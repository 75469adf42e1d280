//! Slow token checks off the event loop: a LOGIN whose user's token is an Argon2 hash takes
//! tens of milliseconds to check, which the single-threaded loop must not spend while it fans
//! out updates. One worker thread checks them in turn (`peregrine_md::distributor::entitle::
//! verify_token`) and wakes the loop with each result (a `mio::Waker`); the loop hands it to
//! the core (`Distributor::verification_done`). Checks are bounded by the connections waiting
//! to log in (`max_pending_clients`, one LOGIN each). Dropping the verifier ends the thread.

use mio::Waker;
use peregrine_md::distributor::entitle::verify_token;
use peregrine_md::distributor::{ClientId, Verification};
use std::io;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

pub(super) struct Verifier {
    jobs: Option<Sender<Verification>>,
    results: Receiver<(ClientId, bool)>,
    thread: Option<JoinHandle<()>>,
}

impl Verifier {
    pub fn start(waker: Arc<Waker>) -> io::Result<Verifier> {
        let (jobs, inbox) = channel::<Verification>();
        let (outbox, results) = channel();
        let thread = std::thread::Builder::new()
            .name("peregrine-login".into())
            .spawn(move || {
                for v in inbox {
                    let matched = verify_token(&v.hash, &v.token);
                    if outbox.send((v.client, matched)).is_err() {
                        return;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(Verifier {
            jobs: Some(jobs),
            results,
            thread: Some(thread),
        })
    }

    pub fn submit(&self, v: Verification) {
        if let Some(jobs) = &self.jobs {
            // The thread outlives the sender: a send fails only if it panicked, and then the
            // client's login times out.
            let _ = jobs.send(v);
        }
    }

    /// A result ready now, if any.
    pub fn next_result(&self) -> Option<(ClientId, bool)> {
        self.results.try_recv().ok()
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

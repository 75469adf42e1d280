//! The bytes the distributor wants appended to client queues, each with its recipients: an
//! update is written here once and listed with every watcher it goes to.

use super::ClientId;
use core::ops::Range;

/// Bytes to append, in order, to the queue of each client listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit<'a> {
    pub clients: &'a [ClientId],
    /// One or more whole messages.
    pub bytes: &'a [u8],
}

#[derive(Debug, Clone)]
struct Record {
    bytes: Range<usize>,
    clients: Range<usize>,
}

/// Arenas of bytes and recipients, emptied once everything was polled.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    bytes: Vec<u8>,
    clients: Vec<ClientId>,
    records: Vec<Record>,
    /// Records before this one were polled.
    next: usize,
}

impl Outbox {
    /// Empties the arenas if everything was polled (their capacity is kept).
    fn reset_if_drained(&mut self) {
        if self.next == self.records.len() && self.next > 0 {
            self.bytes.clear();
            self.clients.clear();
            self.records.clear();
            self.next = 0;
        }
    }

    /// The byte arena, to encode a message at its end; then [`fan_out`](Self::fan_out) or
    /// [`send_to`](Self::send_to) it.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.reset_if_drained();
        &mut self.bytes
    }

    /// Starts a record for the bytes from `from` to the end of the arena; recipients are added
    /// with [`add_recipient`](Self::add_recipient); [`finish`](Self::finish) closes it.
    pub fn begin(&mut self, from: usize) -> usize {
        self.records.push(Record {
            bytes: from..self.bytes.len(),
            clients: self.clients.len()..self.clients.len(),
        });
        self.records.len() - 1
    }

    pub fn add_recipient(&mut self, record: usize, client: ClientId) {
        self.clients.push(client);
        if let Some(r) = self.records.get_mut(record) {
            r.clients.end = self.clients.len();
        }
    }

    /// Closes a record; one nobody receives is removed with its bytes.
    pub fn finish(&mut self, record: usize) {
        if record + 1 == self.records.len() && self.records[record].clients.is_empty() {
            let r = self.records.pop().expect("the record just checked");
            self.bytes.truncate(r.bytes.start);
        }
    }

    /// Sends the bytes from `from` to the end of the arena to one client, extending the last
    /// record when it is that client's alone and not yet polled (a burst of answers to one
    /// OPEN is one record).
    pub fn send_to(&mut self, from: usize, client: ClientId) {
        let unpolled = self.records.len() > self.next;
        if let Some(last) = self.records.last_mut() {
            let theirs =
                last.clients.len() == 1 && self.clients.get(last.clients.start) == Some(&client);
            if theirs && unpolled && last.bytes.end == from {
                last.bytes.end = self.bytes.len();
                return;
            }
        }
        let r = self.begin(from);
        self.add_recipient(r, client);
    }

    /// The next record, in the order they were made.
    pub fn poll(&mut self) -> Option<Transmit<'_>> {
        self.reset_if_drained();
        let r = self.records.get(self.next)?.clone();
        self.next += 1;
        Some(Transmit {
            clients: &self.clients[r.clients],
            bytes: &self.bytes[r.bytes],
        })
    }

    /// Bytes held (for bounds checks).
    pub fn len_bytes(&self) -> usize {
        self.bytes.len() + self.clients.len() * size_of::<ClientId>()
    }
}

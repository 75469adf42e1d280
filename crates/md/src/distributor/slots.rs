//! Client slots: ids that are never reused while a client lives, and the counts the limits
//! are checked against (pending logins, logged-in clients, per address and per user).

use super::client::{Client, ClientId, ClientLink};
use super::entitle::SlowPolicy;
use super::throttle::address_group;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

/// Client slots: a [`ClientId`] is a slot and that slot's generation.
#[derive(Debug, Default)]
pub(super) struct Clients {
    pub(super) slots: Vec<Option<Client>>,
    pub(super) generations: Vec<u32>,
    pub(super) free: Vec<u32>,
    pub(super) len: usize,
    /// Connections holding a pending slot, oldest first (ids of gone ones are skipped).
    pub(super) pending: VecDeque<ClientId>,
    pub(super) pending_len: usize,
    /// Logged-in connections (holding a `max_clients` slot).
    pub(super) logged_in: usize,
    /// Connections per [`address_group`].
    pub(super) per_address: HashMap<IpAddr, u32>,
    /// Logged-in connections per user (index in the users file).
    pub(super) per_user: HashMap<usize, u32>,
}

impl Clients {
    pub(super) fn get(&self, id: ClientId) -> Option<&Client> {
        let slot = (id.0 & 0xffff_ffff) as usize;
        let c = self.slots.get(slot)?.as_ref()?;
        (c.id == id).then_some(c)
    }
    pub(super) fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        let slot = (id.0 & 0xffff_ffff) as usize;
        let c = self.slots.get_mut(slot)?.as_mut()?;
        (c.id == id).then_some(c)
    }
    pub(super) fn insert(&mut self, now_ns: u64, slow: SlowPolicy, link: ClientLink) -> ClientId {
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        let id = ClientId((u64::from(self.generations[slot]) << 32) | slot as u64);
        self.slots[slot] = Some(Client::new(id, now_ns, slow, link));
        self.len += 1;
        // Ids at the front that logged in or went are dropped first, so the queue holds at
        // most the connections of one login timeout, not every connection ever made.
        let _ = self.oldest_pending();
        self.pending.push_back(id);
        self.pending_len += 1;
        *self
            .per_address
            .entry(address_group(link.peer))
            .or_default() += 1;
        id
    }
    pub(super) fn remove(&mut self, id: ClientId) -> Option<Client> {
        self.get(id)?;
        let slot = (id.0 & 0xffff_ffff) as usize;
        self.free.push(slot as u32);
        self.len -= 1;
        let c = self.slots[slot].take()?;
        if c.pending {
            self.pending_len -= 1;
        }
        if let Some(u) = c.counted_user {
            self.logged_in -= 1;
            if let Some(n) = self.per_user.get_mut(&u) {
                *n -= 1;
                if *n == 0 {
                    self.per_user.remove(&u);
                }
            }
        }
        let group = address_group(c.link.peer);
        if let Some(n) = self.per_address.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&group);
            }
        }
        Some(c)
    }
    /// The client moves from a pending slot to a logged-in one as `user`.
    pub(super) fn logged_in(&mut self, id: ClientId, user: usize) {
        let Some(c) = self.get_mut(id) else { return };
        let was_pending = std::mem::replace(&mut c.pending, false);
        c.counted_user = Some(user);
        if was_pending {
            self.pending_len -= 1;
        }
        self.logged_in += 1;
        *self.per_user.entry(user).or_default() += 1;
    }
    /// The oldest connection still waiting to log in.
    pub(super) fn oldest_pending(&mut self) -> Option<ClientId> {
        while let Some(&id) = self.pending.front() {
            if self.get(id).is_some_and(|c| c.pending && !c.closing()) {
                return Some(id);
            }
            self.pending.pop_front();
        }
        None
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = &Client> {
        self.slots.iter().flatten()
    }
}

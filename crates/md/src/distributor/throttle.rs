//! Failed-login throttling, per user name and per client address: after [`FREE_FAILURES`]
//! failures for a user (or [`FREE_FAILURES_PER_ADDRESS`] from an address, which may carry
//! several users behind one NAT), each further failure makes the next login for that user (or
//! from that address) wait, from [`FIRST_DELAY_NS`] doubling to [`MAX_DELAY_NS`]. A login
//! that comes sooner is refused without its token being checked, so a guesser gets a handful
//! of guesses, then a few per minute. An address that guesses also holds back the honest
//! users behind it: the price of not letting it guess. A record is forgotten [`FORGET_NS`]
//! after its last failure; a user's record also when it logs in.

use std::collections::HashMap;
use std::net::IpAddr;

/// The address a client is counted under, for connection limits and throttling: itself, or
/// for IPv6 its /64 (one host usually holds a whole /64, and would otherwise rotate through it).
pub fn address_group(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into())
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().expect("checked")),
        v4 => v4,
    }
}

/// Failures for one user with no delay (a user mistyping a token, a test of a wrong one).
pub const FREE_FAILURES: u32 = 3;
/// Failures from one address with no delay.
pub const FREE_FAILURES_PER_ADDRESS: u32 = 10;
/// The delay after the first failure past the free ones.
pub const FIRST_DELAY_NS: u64 = 100_000_000;
/// The longest delay.
pub const MAX_DELAY_NS: u64 = 30_000_000_000;
/// A record with no failure for this long is forgotten.
pub const FORGET_NS: u64 = 600_000_000_000;
/// Records kept per kind at most (memory is bounded whatever the names guessed); past it,
/// the ones past their delay are forgotten first.
const MAX_RECORDS: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last_ns: u64,
    /// No login is checked before this.
    until_ns: u64,
}

impl Failures {
    fn record(&mut self, now_ns: u64, free: u32) {
        if now_ns.saturating_sub(self.last_ns) >= FORGET_NS {
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.last_ns = now_ns;
        if self.count > free {
            let doublings = (self.count - free - 1).min(20);
            let delay = (FIRST_DELAY_NS << doublings).min(MAX_DELAY_NS);
            self.until_ns = now_ns.saturating_add(delay);
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct LoginThrottle {
    by_address: HashMap<IpAddr, Failures>,
    by_user: HashMap<Box<str>, Failures>,
}

impl LoginThrottle {
    /// Nanoseconds until a login from `peer` as `user` is checked again; `None`: now.
    pub fn wait_ns(&self, peer: IpAddr, user: &str, now_ns: u64) -> Option<u64> {
        let peer = address_group(peer);
        let until = [self.by_address.get(&peer), self.by_user.get(user)]
            .into_iter()
            .flatten()
            .map(|f| f.until_ns)
            .max()?;
        (until > now_ns).then(|| until - now_ns)
    }

    /// A login from `peer` as `user` failed.
    pub fn failed(&mut self, peer: IpAddr, user: &str, now_ns: u64) {
        let peer = address_group(peer);
        bound(&mut self.by_address, now_ns);
        bound(&mut self.by_user, now_ns);
        let fresh = Failures {
            count: 0,
            last_ns: now_ns,
            until_ns: 0,
        };
        self.by_address
            .entry(peer)
            .or_insert(fresh)
            .record(now_ns, FREE_FAILURES_PER_ADDRESS);
        match self.by_user.get_mut(user) {
            Some(f) => f.record(now_ns, FREE_FAILURES),
            None => {
                let mut f = fresh;
                f.record(now_ns, FREE_FAILURES);
                self.by_user.insert(user.into(), f);
            }
        }
    }

    /// `user` logged in: its record is forgotten (its address's is kept: one valid account
    /// must not reset the penalty of an address guessing others).
    pub fn succeeded(&mut self, user: &str) {
        self.by_user.remove(user);
    }

    /// Records held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_address.len() + self.by_user.len()
    }
}

/// Keeps a map under [`MAX_RECORDS`]: forgets the records past their delay (or all, if every
/// one is still delaying: the guesser then starts over from its free failures, still bounded
/// by its address's record).
fn bound<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Failures>, now_ns: u64) {
    if map.len() < MAX_RECORDS {
        return;
    }
    map.retain(|_, f| f.until_ns > now_ns && now_ns.saturating_sub(f.last_ns) < FORGET_NS);
    if map.len() >= MAX_RECORDS {
        map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn delays_start_after_the_free_failures_and_double_to_the_cap() {
        let mut t = LoginThrottle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut now = 1_000 * MS;
        for _ in 0..FREE_FAILURES {
            assert_eq!(t.wait_ns(a, "alice", now), None);
            t.failed(a, "alice", now);
        }
        assert_eq!(
            t.wait_ns(a, "alice", now),
            None,
            "free failures cost nothing"
        );
        let mut expected = FIRST_DELAY_NS;
        for _ in 0..12 {
            t.failed(a, "alice", now);
            // alice waits, from any address.
            assert_eq!(t.wait_ns(b, "alice", now), Some(expected));
            assert!(t.wait_ns(a, "alice", now) >= Some(expected));
            assert_eq!(t.wait_ns(b, "bob", now), None);
            now += MAX_DELAY_NS;
            assert_eq!(t.wait_ns(a, "alice", now), None);
            expected = (expected * 2).min(MAX_DELAY_NS);
        }
        assert_eq!(expected, MAX_DELAY_NS);
        // 15 failures from the address: past its own free ones, it holds back every user
        // behind it; another address is not held back.
        t.failed(a, "carol", now);
        assert!(t.wait_ns(a, "bob", now).is_some());
        assert!(t.wait_ns(b, "bob", now).is_none());
        // A login as alice clears alice's record, not the address's.
        t.succeeded("alice");
        assert!(t.wait_ns(b, "alice", now).is_none());
        assert!(t.wait_ns(a, "alice", now).is_some());
        // Forgotten after a quiet while: free failures again.
        now += FORGET_NS;
        t.failed(a, "dave", now);
        assert_eq!(t.wait_ns(a, "dave", now), None);
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_group(a), address_group(b));
        assert_ne!(address_group(a), address_group(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(address_group(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
        let mut t = LoginThrottle::default();
        for i in 0..=FREE_FAILURES_PER_ADDRESS {
            t.failed(a, &format!("u{i}"), 0);
        }
        assert!(t.wait_ns(b, "someone", 0).is_some());
        assert!(t.wait_ns(c, "someone", 0).is_none());
    }

    #[test]
    fn memory_stays_bounded_whatever_names_are_guessed() {
        let mut t = LoginThrottle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for i in 0..(3 * MAX_RECORDS as u64) {
            t.failed(a, &format!("u{i}"), i);
        }
        assert!(t.len() <= MAX_RECORDS + 1, "{}", t.len());
        // The guessing address is still held back.
        assert!(t.wait_ns(a, "anyone", 3 * MAX_RECORDS as u64).is_some());
    }
}

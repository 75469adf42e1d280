//! When a publication advertises and a subscription queries: an initial phase of doubling
//! intervals, then a sustain phase (UM's resolver schedules).

/// When advertisements (or queries) are sent: an initial phase of doubling intervals, then a
/// steady sustain interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The first interval of the initial phase.
    pub min_initial_interval_ns: u64,
    /// The interval doubles after each send up to this.
    pub max_initial_interval_ns: u64,
    /// How long the initial phase lasts, from the first send.
    pub initial_duration_ns: u64,
    /// The interval after the initial phase.
    pub sustain_interval_ns: u64,
}

impl Schedule {
    /// The defaults of advertisements: 10 ms doubling to 500 ms for 5 s, then every second.
    pub const ADVERTISE: Schedule = Schedule {
        min_initial_interval_ns: 10_000_000,
        max_initial_interval_ns: 500_000_000,
        initial_duration_ns: 5_000_000_000,
        sustain_interval_ns: 1_000_000_000,
    };
    /// The defaults of queries: 20 ms doubling to 200 ms for 5 s, then every second (exact
    /// subscriptions still unresolved only).
    pub const QUERY: Schedule = Schedule {
        min_initial_interval_ns: 20_000_000,
        max_initial_interval_ns: 200_000_000,
        initial_duration_ns: 5_000_000_000,
        sustain_interval_ns: 1_000_000_000,
    };

    /// When the next send is due, given the first send at `start_ns`, the latest at `last_ns`
    /// and `sends` sends so far (at least 1).
    pub fn next_ns(&self, start_ns: u64, last_ns: u64, sends: u32) -> u64 {
        if last_ns.saturating_sub(start_ns) < self.initial_duration_ns {
            let doublings = sends.saturating_sub(1).min(40);
            let interval = self
                .min_initial_interval_ns
                .saturating_mul(1u64 << doublings)
                .min(self.max_initial_interval_ns);
            last_ns.saturating_add(interval)
        } else {
            last_ns.saturating_add(self.sustain_interval_ns)
        }
    }

    /// Whether the initial phase is over after a send at `last_ns`.
    pub fn in_initial_phase(&self, start_ns: u64, last_ns: u64) -> bool {
        last_ns.saturating_sub(start_ns) < self.initial_duration_ns
    }

    /// Checks the values: every interval positive and the maximum at least the minimum.
    pub fn check(&self) -> Result<(), String> {
        if self.min_initial_interval_ns == 0 || self.sustain_interval_ns == 0 {
            return Err("intervals must be above 0".into());
        }
        if self.max_initial_interval_ns < self.min_initial_interval_ns {
            return Err(format!(
                "the maximum initial interval ({} ms) is below the minimum ({} ms)",
                self.max_initial_interval_ns / 1_000_000,
                self.min_initial_interval_ns / 1_000_000
            ));
        }
        Ok(())
    }
}

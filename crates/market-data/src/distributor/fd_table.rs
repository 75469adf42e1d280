//! The process's table of file descriptors, grown once before serving to hold every
//! connection the limits allow.
//!
//! The kernel grows the table by doubling when a new descriptor does not fit, and in a process
//! with more than one thread (the distributor has its token verifier) each growth waits for an
//! RCU grace period (`expand_fdtable`). Under a flood of connections that wait landed inside
//! one `accept`: 13 to 34 ms measured on the 2-core guest as the table passed 256 and 512
//! descriptors, a stop of the whole loop, and every client's updates waited behind it. Grown
//! at start, the table never grows under load (it never shrinks either).

use rustix::fd::AsFd;
use rustix::process::{getrlimit, Resource};

/// Grows the descriptor table to hold descriptor `want` (within the open files limit) by
/// duplicating `fd` at that number and closing the copy. Returns the highest descriptor the
/// table holds now without growing, or the error of the duplication.
pub(super) fn reserve(fd: impl AsFd, want: usize) -> rustix::io::Result<usize> {
    let limit = getrlimit(Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
        .min(i32::MAX as u64) as usize;
    // F_DUPFD takes a number below the soft limit.
    let at = want.min(limit.saturating_sub(1));
    let copy = rustix::io::fcntl_dupfd_cloexec(fd, at as i32)?;
    drop(copy);
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The size of this process's descriptor table, from `FDSize` in /proc/self/status.
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    /// After the reservation the kernel's table holds the descriptor asked for (`FDSize`), and
    /// the copy made for it is closed again (the next descriptor is a low one).
    #[test]
    fn the_table_holds_the_descriptors_asked_for_and_nothing_stays_open() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX) as usize;
        let want = 3000.min(limit - 1);
        let got = reserve(&file, want).unwrap();
        assert_eq!(got, want);
        assert!(
            table_size() > got,
            "FDSize {} after reserving {got}",
            table_size()
        );
        let next = std::fs::File::open("/dev/null").unwrap();
        assert!(
            (next.as_raw_fd() as usize) < got,
            "the copy at {got} was closed: the next descriptor is {}",
            next.as_raw_fd()
        );
    }

    #[test]
    fn a_reservation_past_the_open_files_limit_stops_below_it() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let limit = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX) as usize;
        assert_eq!(
            reserve(&file, usize::MAX).unwrap(),
            limit.min(i32::MAX as usize) - 1
        );
    }
}

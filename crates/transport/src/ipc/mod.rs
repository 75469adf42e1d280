//! `ipc://NAME`: shared memory between processes on one host.
//!
//! One publisher per name writes a single-writer log in a memory-mapped segment
//! (`/dev/shm/peregrine-UID/NAME`); any number of subscribers in other processes of the same
//! user read it. See [`layout`] for the memory layout and the invariants the lock-free protocol
//! relies on, [`segment`] for creation, liveness and reclaiming segments left by dead
//! publishers, [`dir`] for the per-user directory and who can open what, and [`sigbus`] for
//! surviving a segment truncated under us.
//!
//! URI parameters (all optional; subscribers take the first three from the segment):
//!
//! | key | default | accepted |
//! | --- | --- | --- |
//! | `capacity` | `16m` | log size in bytes, a power of two from `64k` to `4g` (suffixes k, m, g) |
//! | `policy` | `backpressure` | `backpressure` or `overwrite` (DESIGN section 5) |
//! | `max_subscribers` | `16` | 1 to 1024 |
//! | `flow_timeout_ms` | `1000` | 1 to 3600000: publisher, `policy=backpressure`: subscribers that made no progress for this long while offers were refused are left on the old log, and the publisher goes on in a new one (layout invariant 6); they are told exactly what they missed when they read again |
//! | `host`, `user` | none | written by topic resolution: the host and the user id of the publisher, so that subscribers elsewhere, or of another user, take a network transport instead |
//! | `group` | none | a group name or id: share the segment with that group's members (directory `peregrine-group-GID`, mode 0770) instead of keeping it to the user; the publisher and its subscribers must all name it, and a subscriber only attaches to that group's segments |

#![allow(unsafe_code)]

pub mod dir;
pub mod layout;
mod publisher;
pub mod segment;
pub mod sigbus;
mod subscriber;

pub use layout::SlowSubscriberPolicy;
pub use publisher::{IpcClaim, IpcPublisher};
pub use subscriber::IpcSubscriber;

use crate::uri::{parse_bytes, Scheme, Uri, UriError};

/// A validated `ipc://` configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcConfig {
    pub name: String,
    pub capacity: u64,
    pub policy: SlowSubscriberPolicy,
    pub max_subscribers: u32,
    /// `flow_timeout_ms=`: how long subscribers that make no progress may hold a back-pressure
    /// publisher (see [`layout`] invariant 6).
    pub flow_timeout_ns: u64,
    /// `host=`: the host that owns the segment (see [`crate::resolver::host_id`]). Topic
    /// resolution advertises it so a subscriber elsewhere does not try to map the segment.
    pub host: Option<String>,
    /// `group=`: the group (id) to share the segment with, instead of the user alone.
    pub group: Option<u32>,
    /// Where the per-user (or per-group) directory is made: `None` for `$PEREGRINE_SHM_DIR`,
    /// else `/dev/shm`. Not a URI parameter: a URI (which topic resolution may carry from
    /// another process) never chooses a directory.
    pub base_dir: Option<std::path::PathBuf>,
}

impl IpcConfig {
    pub const DEFAULT_CAPACITY: u64 = 16 << 20;
    pub const DEFAULT_MAX_SUBSCRIBERS: u32 = 16;
    pub const DEFAULT_FLOW_TIMEOUT_NS: u64 = 1_000_000_000;
    /// The URI parameters `ipc://` accepts.
    pub const KEYS: [&'static str; 7] = [
        "capacity",
        "policy",
        "max_subscribers",
        "flow_timeout_ms",
        "host",
        "group",
        "user",
    ];

    /// A default configuration for segment `name`.
    pub fn new(name: &str) -> Self {
        IpcConfig {
            name: name.to_string(),
            capacity: Self::DEFAULT_CAPACITY,
            policy: SlowSubscriberPolicy::BackPressure,
            max_subscribers: Self::DEFAULT_MAX_SUBSCRIBERS,
            flow_timeout_ns: Self::DEFAULT_FLOW_TIMEOUT_NS,
            host: None,
            group: None,
            base_dir: None,
        }
    }

    /// Where this configuration's segments live.
    pub fn dir_spec(&self) -> dir::DirSpec {
        dir::DirSpec {
            base: self.base_dir.clone(),
            group: self.group,
        }
    }

    /// Validates an `ipc://` URI.
    pub fn from_uri(uri: &Uri) -> Result<Self, UriError> {
        if uri.scheme != Scheme::Ipc {
            return Err(uri.error("not an ipc:// URI"));
        }
        dir::validate_name(&uri.address).map_err(|e| uri.error(e))?;
        uri.check_keys(&Self::KEYS)?;
        let mut cfg = IpcConfig::new(&uri.address);
        if let Some(v) = uri.param("capacity") {
            cfg.capacity = parse_bytes(v)
                .filter(|c| c.is_power_of_two() && (layout::MIN_CAPACITY..=layout::MAX_CAPACITY).contains(c))
                .ok_or_else(|| {
                    uri.error(format!(
                        "capacity={v} is not accepted: give a power of two from 64k to 4g, for example capacity=16m"
                    ))
                })?;
        }
        if let Some(v) = uri.param("policy") {
            cfg.policy = match v {
                "backpressure" => SlowSubscriberPolicy::BackPressure,
                "overwrite" => SlowSubscriberPolicy::Overwrite,
                _ => {
                    return Err(uri.error(format!(
                        "policy={v} is not accepted: use policy=backpressure or policy=overwrite"
                    )))
                }
            };
        }
        if let Some(v) = uri.param("max_subscribers") {
            cfg.max_subscribers = v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=layout::MAX_SUBSCRIBERS_LIMIT).contains(n))
                .ok_or_else(|| {
                    uri.error(format!(
                        "max_subscribers={v} is not accepted: give a whole number from 1 to 1024"
                    ))
                })?;
        }
        if let Some(ms) = crate::net::config::num_param(
            uri,
            "flow_timeout_ms",
            1..=3_600_000,
            "1 to 3600000 milliseconds: how long subscribers that read nothing may hold the publisher back, for example flow_timeout_ms=1000",
        )? {
            cfg.flow_timeout_ns = ms * 1_000_000;
        }
        if let Some(v) = uri.param("host") {
            if v.is_empty()
                || v.len() > 64
                || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(uri.error(format!(
                    "host={v} is not accepted: a host id is 1 to 64 letters, digits and '-' (topic resolution writes it)"
                )));
            }
            cfg.host = Some(v.to_string());
        }
        if let Some(v) = uri.param("user") {
            v.parse::<u32>().map_err(|_| {
                uri.error(format!(
                    "user={v} is not accepted: a user id (topic resolution writes it)"
                ))
            })?;
        }
        if let Some(v) = uri.param("group") {
            cfg.group = Some(dir::group_id(v).ok_or_else(|| {
                uri.error(format!(
                    "group={v} is not accepted: no such group on this host (give a group name or id that `getent group` lists)"
                ))
            })?);
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests;

//! Warm standby in the C ABI: a `pg_md_consumer` made by `pg_md_consumer_new_warm` holds two
//! logins ([`WarmStandby`], as an [`AnyConsumer`]) behind the same handle and the same calls
//! as one made by `pg_md_consumer_new`, and `pg_md_consumer_standby` reports how its standby
//! stands.

use super::consumer::{consumer_handle, tls_options, with_consumer};
use super::pg_md_consumer;
use crate::{run, text, Failure};
use peregrine_market_data::consumer::{AnyConsumer, ConnectOptions, Consumer, WarmStandby};
use std::ffi::c_char;

/// The single login of `c`, for the calls a warm standby does not take (`call` names the one
/// refused).
pub(super) fn plain<'a>(c: &'a mut AnyConsumer, call: &str) -> Result<&'a mut Consumer, Failure> {
    c.plain().ok_or_else(|| {
        Failure::invalid(format!(
            "{call} is not available on a warm standby consumer: it pauses and resumes its \
             requests on the standby itself, and a request made on one login only would number \
             the two logins' requests apart. Open and close requests, or use a consumer made \
             by pg_md_consumer_new"
        ))
    })
}

/// How a warm standby consumer's standby stands (`pg_md_consumer_standby`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pg_md_standby {
    /// 1: the standby is logged in with every request paused and every image the active
    /// has, so a failover now passes no item on stale; 0: not yet (or not now).
    pub standing_by: i32,
    /// Items the standby has a current image of.
    pub standby_items: u64,
    /// Times the standby took over.
    pub failovers: u64,
    /// Messages of a new active not passed on because the application had them already.
    pub duplicates_dropped: u64,
}

/// Logs in to `active` (waiting up to 10 s, as `pg_md_consumer_new`) and to `standby` (in the
/// background: it stands by once logged in, retrying with back-off until then), both as
/// `user` with `token`; the consumer into `*out`. It takes the same calls as a consumer of one
/// login, but `pg_md_consumer_pause`, `_resume` and `_snapshot`: when the active connection
/// is lost, the standby (logged in, its requests paused) is resumed and takes over, and the
/// application sees `PG_MD_DISCONNECTED`, then the new active's events: no item stale that
/// the standby had an image of, and no message it already had again.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_new_warm(
    active: *const c_char,
    standby: *const c_char,
    user: *const c_char,
    token: *const c_char,
    out: *mut *mut pg_md_consumer,
) -> i32 {
    run(|| {
        new_warm(
            active,
            standby,
            user,
            token,
            || Ok(ConnectOptions::plain()),
            out,
        )
    })
}

/// [`pg_md_consumer_new_warm`] over TLS, with the options of `pg_md_consumer_new_tls` (both
/// logins check their distributor's certificate alike).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn pg_md_consumer_new_warm_tls(
    active: *const c_char,
    standby: *const c_char,
    user: *const c_char,
    token: *const c_char,
    ca_file: *const c_char,
    cert_file: *const c_char,
    key_file: *const c_char,
    server_name: *const c_char,
    out: *mut *mut pg_md_consumer,
) -> i32 {
    run(|| {
        let options = || tls_options(ca_file, cert_file, key_file, server_name);
        new_warm(active, standby, user, token, options, out)
    })
}

/// The body of the warm standby constructors.
fn new_warm(
    active: *const c_char,
    standby: *const c_char,
    user: *const c_char,
    token: *const c_char,
    options: impl FnOnce() -> Result<ConnectOptions, Failure>,
    out: *mut *mut pg_md_consumer,
) -> Result<i32, Failure> {
    crate::check_out(out, "out")?;
    let active = text(active, "active")?;
    let standby = text(standby, "standby")?;
    if active == standby {
        return Err(Failure::invalid(format!(
            "active and standby are both {active}: give the standby another distributor's address"
        )));
    }
    let user = text(user, "user")?;
    let token = text(token, "token")?;
    let w = WarmStandby::connect(active, standby, user, token.as_bytes(), options()?)?;
    consumer_handle(w.into(), out)
}

/// How the standby of a consumer made by `pg_md_consumer_new_warm` stands, into `*out`.
/// `PG_ERROR_INVALID_ARGUMENT` for a consumer of one login.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_standby(
    consumer: *mut pg_md_consumer,
    out: *mut pg_md_standby,
) -> i32 {
    with_consumer(consumer, |c| {
        let Some(w) = c.consumer.warm() else {
            return Err(Failure::invalid(
                "this consumer has no standby: it was made by pg_md_consumer_new; make it with \
                 pg_md_consumer_new_warm for a warm standby",
            ));
        };
        let state = pg_md_standby {
            standing_by: i32::from(w.standing_by()),
            standby_items: w.standby_items() as u64,
            failovers: w.failovers(),
            duplicates_dropped: w.duplicates_dropped(),
        };
        crate::put(out, state, "out")?;
        Ok(0)
    })
}

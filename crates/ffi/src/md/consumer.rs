//! `pg_md_consumer_*`: a login to a distributor (or the next of a list), its requests, posts
//! and polled events.

use super::convert::{c_ack_code, c_field, c_names, c_state};
use super::types::*;
use super::{fields_in, texts};
use crate::error::pg_status::*;
use crate::{check_out, free, insert, put, run, text, with, Failure, Kind};
use peregrine_market_data::consumer::{
    AnyConsumer, ConnectOptions, Consumer, ConsumerError, Event,
};
use peregrine_market_data::tls::ClientTls;
use peregrine_md::consumer::ConsumerError as SessionError;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::time::Duration;

#[derive(Debug)]
pub(super) struct ConsumerObject {
    pub(super) consumer: AnyConsumer,
    /// The dictionary's names as C strings, by field id.
    pub(super) names: HashMap<u16, CString>,
    pub(super) fields: Vec<pg_md_field>,
}

pub(super) fn with_consumer(
    c: *mut pg_md_consumer,
    body: impl FnOnce(&mut ConsumerObject) -> Result<i32, Failure>,
) -> i32 {
    with(c as usize, Kind::MdConsumer, "consumer", body)
}

impl From<ConsumerError> for Failure {
    fn from(e: ConsumerError) -> Self {
        let status = match &e {
            ConsumerError::Session(SessionError::LoginRefused { .. })
            | ConsumerError::NoDistributor { .. } => PG_ERROR_REFUSED,
            ConsumerError::Session(SessionError::Protocol { .. }) => PG_ERROR_OPEN,
            _ => PG_ERROR_INVALID_ARGUMENT,
        };
        Failure::new(status, e.to_string())
    }
}

/// Connects to the first of `addresses` (`count` of them, `HOST:PORT`) that accepts, logs in
/// as `user` with `token`, and makes the consumer into `*out` once logged in (within 10 s).
/// Fails with `PG_ERROR_REFUSED` for a refused login or no distributor, naming why.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_new(
    addresses: *const *const c_char,
    count: usize,
    user: *const c_char,
    token: *const c_char,
    out: *mut *mut pg_md_consumer,
) -> i32 {
    run(|| {
        new_consumer(
            addresses,
            count,
            user,
            token,
            || Ok(ConnectOptions::plain()),
            out,
        )
    })
}

/// [`pg_md_consumer_new`] over TLS: the distributor's certificate is checked against the
/// PEM CA file `ca_file` and the host of the address connected to (or `server_name`; may be
/// NULL). `cert_file` and `key_file` (both NULL, or both given) are this consumer's PEM
/// certificate and private key (mode 0600), for a user the distributor identifies by its
/// certificate (its token is then any non-empty text). A file that cannot be used is
/// `PG_ERROR_INVALID_ARGUMENT` naming it and the fix; a certificate that does not verify is
/// `PG_ERROR_REFUSED` naming why (`invalid peer certificate: UnknownIssuer`, ...).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn pg_md_consumer_new_tls(
    addresses: *const *const c_char,
    count: usize,
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
        new_consumer(addresses, count, user, token, options, out)
    })
}

/// The TLS options of [`pg_md_consumer_new_tls`] and [`pg_md_consumer_new_warm_tls`].
pub(super) fn tls_options(
    ca_file: *const c_char,
    cert_file: *const c_char,
    key_file: *const c_char,
    server_name: *const c_char,
) -> Result<ConnectOptions, Failure> {
    let ca = text(ca_file, "ca_file")?;
    let optional = |p: *const c_char, what: &str| -> Result<Option<&str>, Failure> {
        if p.is_null() {
            Ok(None)
        } else {
            text(p, what).map(Some)
        }
    };
    let identity = match (
        optional(cert_file, "cert_file")?,
        optional(key_file, "key_file")?,
    ) {
        (Some(c), Some(k)) => Some((std::path::Path::new(c), std::path::Path::new(k))),
        (None, None) => None,
        _ => {
            return Err(Failure::invalid(
                "cert_file and key_file go together: give both, or neither (NULL)",
            ))
        }
    };
    let mut tls = ClientTls::load(std::path::Path::new(ca), identity)
        .map_err(|e| Failure::invalid(e.to_string()))?;
    if let Some(name) = optional(server_name, "server_name")? {
        tls = tls
            .with_server_name(name)
            .map_err(|e| Failure::invalid(e.to_string()))?;
    }
    Ok(ConnectOptions::tls(tls))
}

/// The body of the consumer constructors.
pub(super) fn new_consumer(
    addresses: *const *const c_char,
    count: usize,
    user: *const c_char,
    token: *const c_char,
    options: impl FnOnce() -> Result<ConnectOptions, Failure>,
    out: *mut *mut pg_md_consumer,
) -> Result<i32, Failure> {
    check_out(out, "out")?;
    let addresses = texts(addresses, count, "addresses")?;
    let user = text(user, "user")?;
    let token = text(token, "token")?;
    let options = options()?;
    let consumer = Consumer::connect_with(&addresses, user, token.as_bytes(), options)?;
    consumer_handle(consumer.into(), out)
}

/// A handle for a consumer logged in, into `*out`.
pub(super) fn consumer_handle(
    consumer: AnyConsumer,
    out: *mut *mut pg_md_consumer,
) -> Result<i32, Failure> {
    let names = c_names(consumer.active().dictionary());
    let h = insert(
        Kind::MdConsumer,
        ConsumerObject {
            consumer,
            names,
            fields: Vec::new(),
        },
    )?;
    put(out, h as *mut pg_md_consumer, "out")?;
    Ok(0)
}

/// Opens `patterns` (`count` item names or globs) of `service`; the request's id into
/// `*request` (may be NULL).
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_open(
    consumer: *mut pg_md_consumer,
    service: *const c_char,
    patterns: *const *const c_char,
    count: usize,
    request: *mut u32,
) -> i32 {
    consumer_request(consumer, service, patterns, count, request, |c, s, p| {
        Ok(c.open(s, p)?)
    })
}

/// The body of the request makers: the service and patterns read, `make` called, the id put
/// into `*request` (may be NULL).
///
/// # Safety
/// As [`pg_md_consumer_open`]'s arguments.
pub(super) unsafe fn consumer_request(
    consumer: *mut pg_md_consumer,
    service: *const c_char,
    patterns: *const *const c_char,
    count: usize,
    request: *mut u32,
    make: impl FnOnce(&mut AnyConsumer, &str, &[&str]) -> Result<u32, Failure>,
) -> i32 {
    with_consumer(consumer, |c| {
        let service = text(service, "service")?;
        let patterns = texts(patterns, count, "patterns")?;
        let id = make(&mut c.consumer, service, &patterns)?;
        crate::put_optional(request, id)?;
        Ok(0)
    })
}

/// [`pg_md_consumer_open`] for the fields `fids` (`fid_count` field ids) only: refreshes
/// carry those fields, and an update that changes none of them is not sent.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_open_view(
    consumer: *mut pg_md_consumer,
    service: *const c_char,
    patterns: *const *const c_char,
    count: usize,
    fids: *const u16,
    fid_count: usize,
    request: *mut u32,
) -> i32 {
    let fids: &[u16] = if fids.is_null() {
        &[]
    } else {
        // SAFETY: the caller passes `fid_count` readable field ids at `fids` (not null),
        // valid for this call.
        unsafe { std::slice::from_raw_parts(fids, fid_count) }
    };
    // An empty view is refused by the consumer, naming the accepted count.
    consumer_request(consumer, service, patterns, count, request, |c, s, p| {
        Ok(c.open_view_ids(s, p, fids)?)
    })
}

/// Asks for the images of `count` `patterns` of `service` only (a snapshot); its id into
/// `*request` (may be NULL). Each item comes as a `PG_MD_REFRESH` event (or a status), then a
/// `PG_MD_STATUS` event with state closed, an empty item and this request ends it.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_snapshot(
    consumer: *mut pg_md_consumer,
    service: *const c_char,
    patterns: *const *const c_char,
    count: usize,
    request: *mut u32,
) -> i32 {
    consumer_request(consumer, service, patterns, count, request, |c, s, p| {
        Ok(super::standby::plain(c, "pg_md_consumer_snapshot")?.snapshot(s, p)?)
    })
}

/// Pauses request `request` (0: every request open now): the distributor keeps its items'
/// latest state only until `pg_md_consumer_resume`; kept across reconnections.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_pause(consumer: *mut pg_md_consumer, request: u32) -> i32 {
    with_consumer(consumer, |c| {
        super::standby::plain(&mut c.consumer, "pg_md_consumer_pause")?.pause(request)?;
        Ok(0)
    })
}

/// Resumes request `request` (0: every paused one): a refresh (or status) per item that
/// changed meanwhile, then its updates again.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_resume(consumer: *mut pg_md_consumer, request: u32) -> i32 {
    with_consumer(consumer, |c| {
        super::standby::plain(&mut c.consumer, "pg_md_consumer_resume")?.resume(request)?;
        Ok(0)
    })
}

/// Closes a request.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_close(consumer: *mut pg_md_consumer, request: u32) -> i32 {
    with_consumer(consumer, |c| {
        c.consumer.close(request)?;
        Ok(0)
    })
}

/// Waits up to `timeout_ms` milliseconds for events and hands each to `handler`; returns how
/// many. Reconnects by itself; fails only for a refused login (`PG_ERROR_REFUSED`).
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_poll(
    consumer: *mut pg_md_consumer,
    timeout_ms: u32,
    handler: pg_md_event_handler,
    user: *mut c_void,
) -> i32 {
    with_consumer(consumer, |c| {
        let Some(handler) = handler else {
            return Err(Failure::null("handler"));
        };
        let ConsumerObject {
            consumer,
            names,
            fields,
        } = c;
        let mut new_dictionary = false;
        let n = consumer.poll(Duration::from_millis(timeout_ms.into()), &mut |e| {
            let mut ev = pg_md_event {
                kind: 0,
                item: std::ptr::null(),
                item_length: 0,
                item_seq: 0,
                expected: 0,
                timestamp_ns: 0,
                state: 0,
                text: std::ptr::null(),
                text_length: 0,
                request: 0,
                items: 0,
                dropped: 0,
                fields: std::ptr::null(),
                field_count: 0,
            };
            let set_item = |ev: &mut pg_md_event, item: &str| {
                ev.item = item.as_ptr().cast();
                ev.item_length = item.len();
            };
            let mut set_fields =
                |ev: &mut pg_md_event, list: &peregrine_md::codec::FieldList<'_>| {
                    fields.clear();
                    fields.extend(list.iter().map(|f| c_field(f, names)));
                    ev.fields = fields.as_ptr();
                    ev.field_count = fields.len();
                };
            match e {
                Event::LoggedIn { .. } => ev.kind = pg_md_event_kind::PG_MD_LOGGED_IN as i32,
                Event::Refresh {
                    request,
                    item,
                    item_seq,
                    timestamp_ns,
                    fields: f,
                    ..
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_REFRESH as i32;
                    ev.request = request;
                    set_item(&mut ev, item);
                    ev.item_seq = item_seq;
                    ev.timestamp_ns = timestamp_ns;
                    set_fields(&mut ev, &f);
                }
                Event::Update {
                    request,
                    item,
                    item_seq,
                    timestamp_ns,
                    fields: f,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_UPDATE as i32;
                    ev.request = request;
                    set_item(&mut ev, item);
                    ev.item_seq = item_seq;
                    ev.timestamp_ns = timestamp_ns;
                    set_fields(&mut ev, &f);
                }
                Event::Status {
                    item,
                    state,
                    text,
                    request,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_STATUS as i32;
                    set_item(&mut ev, item);
                    ev.state = c_state(state) as i32;
                    ev.text = text.as_ptr().cast();
                    ev.text_length = text.len();
                    ev.request = request;
                }
                Event::Gap {
                    item,
                    expected,
                    got,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_GAP as i32;
                    set_item(&mut ev, item);
                    ev.expected = expected;
                    ev.item_seq = got;
                }
                Event::Conflated {
                    items,
                    updates_dropped,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_CONFLATED as i32;
                    ev.items = items;
                    ev.dropped = updates_dropped;
                }
                Event::Service {
                    service,
                    up,
                    may_open,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_SERVICE as i32;
                    set_item(&mut ev, service);
                    ev.state = if up {
                        pg_md_state::PG_MD_OK
                    } else {
                        pg_md_state::PG_MD_STALE
                    } as i32;
                    ev.items = u32::from(may_open);
                }
                Event::Disconnected { reason } => {
                    ev.kind = pg_md_event_kind::PG_MD_DISCONNECTED as i32;
                    ev.text = reason.as_ptr().cast();
                    ev.text_length = reason.len();
                }
                Event::Ack {
                    post_id,
                    item,
                    code,
                    text,
                } => {
                    ev.kind = pg_md_event_kind::PG_MD_ACK as i32;
                    set_item(&mut ev, item);
                    ev.request = post_id;
                    ev.state = c_ack_code(code) as i32;
                    ev.text = text.as_ptr().cast();
                    ev.text_length = text.len();
                }
                Event::Dictionary { dictionary } => {
                    ev.kind = pg_md_event_kind::PG_MD_DICTIONARY as i32;
                    ev.items = u32::try_from(dictionary.len()).unwrap_or(u32::MAX);
                    new_dictionary = true;
                }
            }
            // SAFETY: a C function pointer given by the caller, called with the caller's `user`
            // and an event whose pointers live for the call.
            unsafe { handler(user, &ev) }
        })?;
        if new_dictionary {
            *names = c_names(consumer.active().dictionary());
        }
        Ok(n.min(i32::MAX as usize) as i32)
    })
}

/// Posts the `fields` (`count` of them; names looked up in the dictionary when `fid` is 0)
/// to `item` of `service`: an update, or with `refresh` 1 a full image (a new item). Its id
/// into `*post_id` (may be NULL): a `PG_MD_ACK` event with that id answers it, exactly once.
/// Fails with `PG_ERROR_INVALID_ARGUMENT` naming the value, or when not logged in.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_post(
    consumer: *mut pg_md_consumer,
    service: *const c_char,
    item: *const c_char,
    fields: *const pg_md_field,
    count: usize,
    refresh: i32,
    post_id: *mut u32,
) -> i32 {
    with_consumer(consumer, |c| {
        let service = text(service, "service")?;
        let item = text(item, "item")?;
        let consumer = c.consumer.active_mut();
        let f = fields_in(consumer.dictionary(), fields, count)?;
        let id = consumer.post(service, item, &f, refresh != 0)?;
        if !post_id.is_null() {
            // SAFETY: not NULL (checked); the caller's u32.
            unsafe { post_id.write(id) };
        }
        Ok(0)
    })
}

/// The consumer's current socket into `*fd`, for an event loop (wait for it to be readable,
/// then poll with a timeout of 0), or -1 between connections; it changes on reconnection.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_fd(consumer: *mut pg_md_consumer, fd: *mut i32) -> i32 {
    with_consumer(consumer, |c| {
        put(fd, c.consumer.active().readable_fd().unwrap_or(-1), "fd")?;
        Ok(0)
    })
}

/// The last PING round trip to the distributor, in nanoseconds, into `*rtt_ns` (0 before one
/// was timed, or with a distributor of protocol version 1). The consumer and the distributor
/// PING each other at the distributor's interval (5 s unless configured); call
/// `pg_md_consumer_poll` at least once an interval, or the distributor takes the consumer for
/// dead after three.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_rtt_ns(
    consumer: *mut pg_md_consumer,
    rtt_ns: *mut u64,
) -> i32 {
    with_consumer(consumer, |c| {
        let ns = c.consumer.active().rtt().map_or(0, |d| d.as_nanos() as u64);
        put(rtt_ns, ns, "rtt_ns")?;
        Ok(0)
    })
}

/// Closes the connection and frees the consumer.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_free(consumer: *mut pg_md_consumer) -> i32 {
    free::<ConsumerObject>(consumer as usize, Kind::MdConsumer, "consumer")
}

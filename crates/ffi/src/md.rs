//! The market data tier in the C ABI: a provider (`pg_md_provider_*`) and a consumer
//! (`pg_md_consumer_*`) over `peregrine-market-data`, with the handle, status and
//! `pg_last_error` conventions of the messaging API (the header's preamble).

use super::{check_out, free, insert, put, run, text, with, Failure, Kind};
use crate::error::pg_status::*;
use crate::pg_context;
use peregrine_market_data::consumer::{
    AnyConsumer, ConnectOptions, Consumer, ConsumerError, Event,
};
use peregrine_market_data::provider::{Post, Provider, ProviderError, ProviderOptions};
use peregrine_market_data::tls::ClientTls;
use peregrine_md::codec::AckCode;
use peregrine_md::consumer::ConsumerError as SessionError;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Field, ItemState, Price, Value};
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::time::Duration;

mod standby;

/// A market data provider of one service (RTSDK's non-interactive provider): it publishes its
/// items on the backbone, keeps their images and answers the distributors' image requests.
/// Opaque; made by `pg_md_provider_new`, freed by `pg_md_provider_free`.
#[derive(Debug)]
pub struct pg_md_provider {
    _opaque: [u8; 0],
}

/// A market data consumer: logged in to a distributor (or the next of a list), its requests
/// and the events they bring. Opaque; made by `pg_md_consumer_new`, freed by
/// `pg_md_consumer_free`.
#[derive(Debug)]
pub struct pg_md_consumer {
    _opaque: [u8; 0],
}

/// The type of a field's value (`pg_md_field.type`), as the dictionary types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_type {
    /// A signed integer: `int_value`.
    PG_MD_INT = 1,
    /// A fixed-point decimal: `int_value` × 10^`exponent` (189.21 is 18921 and -2).
    PG_MD_PRICE = 2,
    /// Nanoseconds since 1970-01-01 UTC: `time_ns`.
    PG_MD_TIME = 3,
    /// An enumerated code: `enum_value`.
    PG_MD_ENUM = 4,
    /// UTF-8 text of `string_length` bytes (at most 255) at `string`.
    PG_MD_STRING = 5,
}

/// One field of a REFRESH or UPDATE. To publish: set `fid`, or leave it 0 and set `name` (a
/// dictionary name, NUL-terminated); set `type` and the value's member. In an event: every
/// member is set, `name` is the dictionary's name or NULL for a field it does not know, and
/// `string` points into the consumer's buffer (not NUL-terminated).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pg_md_field {
    pub fid: u16,
    /// A `pg_md_type`.
    pub r#type: i32,
    pub name: *const c_char,
    /// `PG_MD_INT`: the value; `PG_MD_PRICE`: the mantissa.
    pub int_value: i64,
    /// `PG_MD_PRICE`: the decimal exponent, -12 to 6.
    pub exponent: i32,
    /// `PG_MD_ENUM`: the code.
    pub enum_value: u16,
    /// `PG_MD_TIME`: nanoseconds since the epoch, UTC.
    pub time_ns: u64,
    pub string: *const c_char,
    pub string_length: usize,
}

/// Kinds of market data events (`pg_md_event.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_event_kind {
    /// Logged in (after every connection); every open request was sent again.
    PG_MD_LOGGED_IN = 1,
    /// The item's full image: `fields`.
    PG_MD_REFRESH = 2,
    /// The fields that changed.
    PG_MD_UPDATE = 3,
    /// The item's state (`state`, `text`): stale, closed, not-entitled, not-found, rejected.
    PG_MD_STATUS = 4,
    /// An `item_seq` that did not follow the item's last message (`expected`, `item_seq`):
    /// updates were missed without a STATUS; the UPDATE follows as its own event.
    PG_MD_GAP = 5,
    /// The consumer fell behind: `items` conflated REFRESHes follow (`dropped` updates).
    PG_MD_CONFLATED = 6,
    /// Not connected (`text` says why); items were reported stale just before. The consumer
    /// reconnects by itself.
    PG_MD_DISCONNECTED = 7,
    /// A service of the distributor's directory (`item`: its name; `state`: `PG_MD_OK` while
    /// a provider of it is live, else `PG_MD_STALE`; `items`: 1 if this user may open it),
    /// after each login and when its state changes.
    PG_MD_SERVICE = 8,
    /// The answer to a post (`request`: the post's id; `state`: a `pg_md_ack_code`; `item`;
    /// `text`: why it was refused). Exactly one per post.
    PG_MD_ACK = 9,
    /// The distributor's field dictionary arrived (`items`: its fields); field names come
    /// from it from the next poll on.
    PG_MD_DICTIONARY = 10,
}

/// What became of a post (`pg_md_event.state` of a `PG_MD_ACK`); every code but
/// `PG_MD_ACCEPTED` refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_ack_code {
    /// The provider accepted it.
    PG_MD_ACCEPTED = 0,
    /// The provider refused it (`text` says why).
    PG_MD_REFUSED = 1,
    /// The user may not post to the item (the users file's `post` globs).
    PG_MD_NOT_ENTITLED_TO_POST = 2,
    /// No provider of the service is live.
    PG_MD_SERVICE_DOWN = 3,
    /// The distributor carries no such service.
    PG_MD_UNKNOWN_SERVICE = 4,
    /// Too many posts in flight.
    PG_MD_BUSY = 5,
    /// No answer in time, or the connection broke first (it may or may not have arrived).
    PG_MD_TIMEOUT = 6,
    /// Its content was refused (a field of the wrong type, ...).
    PG_MD_INVALID = 7,
}

/// A post for a provider (`pg_md_provider_poll_post`), valid until the provider's next call.
#[repr(C)]
#[derive(Debug)]
pub struct pg_md_post {
    /// Answer it with this id (`pg_md_provider_accept`, `_refuse`, `_publish_post`).
    pub id: u64,
    /// The user who posted it.
    pub user: *const c_char,
    pub user_length: usize,
    pub item: *const c_char,
    pub item_length: usize,
    /// 1: a full image (a new item); 0: the fields that changed.
    pub refresh: i32,
    pub fields: *const pg_md_field,
    pub field_count: usize,
}

/// Item states (`pg_md_event.state`, and `pg_md_provider_status`'s `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum pg_md_state {
    PG_MD_OK = 0,
    PG_MD_STALE = 1,
    PG_MD_CLOSED = 2,
    PG_MD_NOT_ENTITLED = 3,
    PG_MD_NOT_FOUND = 4,
    PG_MD_REJECTED = 5,
}

/// One market data event, valid only during the handler call it is passed to. Texts are not
/// NUL-terminated: each has its length.
#[repr(C)]
#[derive(Debug)]
pub struct pg_md_event {
    /// A `pg_md_event_kind`.
    pub kind: i32,
    pub item: *const c_char,
    pub item_length: usize,
    /// REFRESH, UPDATE, GAP: the item's `item_seq`.
    pub item_seq: u32,
    /// GAP: the `item_seq` that was due.
    pub expected: u32,
    /// REFRESH, UPDATE: when the provider sent it (its CLOCK_MONOTONIC, nanoseconds).
    pub timestamp_ns: u64,
    /// STATUS: a `pg_md_state`.
    pub state: i32,
    /// STATUS, DISCONNECTED: why, for people.
    pub text: *const c_char,
    pub text_length: usize,
    /// REFRESH, UPDATE: the request it is for (an item several requests hold comes once per
    /// request, each with its own view's fields). STATUS: the request it answers (0: none).
    pub request: u32,
    /// CONFLATED: REFRESHes that follow, and updates dropped.
    pub items: u32,
    pub dropped: u32,
    /// REFRESH, UPDATE: the fields.
    pub fields: *const pg_md_field,
    pub field_count: usize,
}

/// Called by `pg_md_consumer_poll` for each event, on the polling thread. It must not call
/// any function on the same consumer.
pub type pg_md_event_handler =
    Option<unsafe extern "C" fn(user: *mut c_void, event: *const pg_md_event)>;

#[derive(Debug)]
struct ProviderObject {
    provider: Provider,
    /// Posts handed to C and not answered yet, by the id C was given.
    posts: std::collections::BTreeMap<u64, Post>,
    next_post: u64,
    names: HashMap<u16, CString>,
    /// The fields of the post last handed to C.
    fields: Vec<pg_md_field>,
}

/// Posts a C provider may hold unanswered; past it `pg_md_provider_poll_post` hands out no
/// more (the provider answers later ones `busy` itself).
const MAX_C_POSTS: usize = 4096;

#[derive(Debug)]
struct ConsumerObject {
    consumer: AnyConsumer,
    /// The dictionary's names as C strings, by field id.
    names: HashMap<u16, CString>,
    fields: Vec<pg_md_field>,
}

fn with_provider(
    p: *mut pg_md_provider,
    body: impl FnOnce(&mut ProviderObject) -> Result<i32, Failure>,
) -> i32 {
    with(p as usize, Kind::MdProvider, "provider", body)
}

fn with_consumer(
    c: *mut pg_md_consumer,
    body: impl FnOnce(&mut ConsumerObject) -> Result<i32, Failure>,
) -> i32 {
    with(c as usize, Kind::MdConsumer, "consumer", body)
}

impl From<ProviderError> for Failure {
    fn from(e: ProviderError) -> Self {
        let status = match &e {
            ProviderError::Refused(_) => PG_ERROR_INVALID_ARGUMENT,
            ProviderError::BackPressured => PG_ERROR_BACK_PRESSURED,
            ProviderError::Send(_) => PG_ERROR_SEND,
            _ => PG_ERROR_OPEN,
        };
        Failure::new(status, e.to_string())
    }
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

/// The texts of a C array of `count` NUL-terminated strings.
fn texts<'a>(p: *const *const c_char, count: usize, what: &str) -> Result<Vec<&'a str>, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    if count > 1 << 20 {
        return Err(Failure::invalid(format!(
            "{what}: {count} strings; give at most 1048576"
        )));
    }
    (0..count)
        .map(|i| {
            // SAFETY: the caller passes an array of `count` string pointers (header).
            let s = unsafe { *p.add(i) };
            text(s, what)
        })
        .collect()
}

/// The caller's fields as the model's, names looked up in `dictionary`.
fn fields_in<'a>(
    dictionary: &Dictionary,
    fields: *const pg_md_field,
    count: usize,
) -> Result<Vec<Field<'a>>, Failure> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if fields.is_null() {
        return Err(Failure::null("fields"));
    }
    if count > usize::from(u16::MAX) {
        return Err(Failure::invalid(format!(
            "{count} fields: a message holds at most 65535"
        )));
    }
    // SAFETY: the caller passes an array of `count` fields that lives for the call (header).
    let list = unsafe { std::slice::from_raw_parts(fields, count) };
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let fid = if f.fid != 0 {
                f.fid
            } else {
                let name = text(f.name, "a field's name (fid 0)")?;
                dictionary
                    .by_name(name)
                    .map(|d| d.fid)
                    .ok_or_else(|| {
                        Failure::invalid(format!(
                            "fields[{i}]: {name:?} is not in the dictionary; give a name it has, or the fid"
                        ))
                    })?
            };
            let value = match f.r#type {
                1 => Value::Int(f.int_value),
                2 => Value::Price(Price {
                    mantissa: f.int_value,
                    exponent: i8::try_from(f.exponent).map_err(|_| {
                        Failure::invalid(format!(
                            "fields[{i}]: exponent {} is not accepted: give -12 to 6",
                            f.exponent
                        ))
                    })?,
                }),
                3 => Value::TimeNs(f.time_ns),
                4 => Value::Enum(f.enum_value),
                5 => {
                    if f.string.is_null() && f.string_length > 0 {
                        return Err(Failure::null("a string field's string"));
                    }
                    let bytes = if f.string_length == 0 {
                        &[][..]
                    } else {
                        // SAFETY: `string_length` bytes at `string` (header).
                        unsafe { std::slice::from_raw_parts(f.string.cast::<u8>(), f.string_length) }
                    };
                    Value::Str(std::str::from_utf8(bytes).map_err(|e| {
                        Failure::invalid(format!("fields[{i}]: the string is not UTF-8 ({e})"))
                    })?)
                }
                other => {
                    return Err(Failure::invalid(format!(
                        "fields[{i}]: type {other} is not accepted: give PG_MD_INT, PG_MD_PRICE, PG_MD_TIME, PG_MD_ENUM or PG_MD_STRING"
                    )))
                }
            };
            Ok(Field::new(fid, value))
        })
        .collect()
}

/// Makes a provider of `service` publishing on `backbone` (sealed with the user's key by
/// default: docs/market-data.md) into `*out`; `requests` is where image requests come from
/// (NULL: the backbone's port + 1). Fails with `PG_ERROR_OPEN` naming what could not be
/// opened, `PG_ERROR_INVALID_ARGUMENT` for a bad service name.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_new(
    context: *mut pg_context,
    service: *const c_char,
    backbone: *const c_char,
    requests: *const c_char,
    out: *mut *mut pg_md_provider,
) -> i32 {
    super::with_context(context, |ctx| {
        check_out(out, "out")?;
        let service = text(service, "service")?;
        let backbone = text(backbone, "backbone")?;
        let mut options = ProviderOptions::new(service, backbone);
        if !requests.is_null() {
            options.requests = Some(text(requests, "requests")?.to_string());
        }
        let provider = Provider::with_options(&ctx.context, options)?;
        let names = c_names(provider.dictionary());
        let h = insert(
            Kind::MdProvider,
            ProviderObject {
                provider,
                posts: std::collections::BTreeMap::new(),
                next_post: 0,
                names,
                fields: Vec::new(),
            },
        )?;
        put(out, h as *mut pg_md_provider, "out")?;
        Ok(0)
    })
}

/// Publishes `item`'s full image: exactly `fields` (`count` of them). Fails with
/// `PG_ERROR_INVALID_ARGUMENT` naming the value (a bad item name, a field the dictionary types
/// differently, an unknown field name) and `PG_ERROR_BACK_PRESSURED` (nothing sent: call
/// `pg_md_provider_do_work` and send it again).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_refresh(
    provider: *mut pg_md_provider,
    item: *const c_char,
    fields: *const pg_md_field,
    count: usize,
) -> i32 {
    with_provider(provider, |p| {
        let item = text(item, "item")?;
        let f = fields_in(p.provider.dictionary(), fields, count)?;
        p.provider.refresh(item, &f)?;
        Ok(0)
    })
}

/// Publishes the `fields` of `item` that changed; the item must have been refreshed. Errors
/// as `pg_md_provider_refresh`'s.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_update(
    provider: *mut pg_md_provider,
    item: *const c_char,
    fields: *const pg_md_field,
    count: usize,
) -> i32 {
    with_provider(provider, |p| {
        let item = text(item, "item")?;
        let f = fields_in(p.provider.dictionary(), fields, count)?;
        p.provider.update(item, &f)?;
        Ok(0)
    })
}

/// `pg_md_provider_refresh` numbered `item_seq` by the application: the upstream's numbering,
/// so that two providers fed the same stream publish the same numbers and a distributor takes
/// each message from whichever comes first (A/B feeds). It must be after the item's last
/// number (`PG_ERROR_INVALID_ARGUMENT` otherwise); unnumbered messages follow on from it.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_refresh_numbered(
    provider: *mut pg_md_provider,
    item: *const c_char,
    fields: *const pg_md_field,
    count: usize,
    item_seq: u32,
) -> i32 {
    with_provider(provider, |p| {
        let item = text(item, "item")?;
        let f = fields_in(p.provider.dictionary(), fields, count)?;
        p.provider.refresh_numbered(item, &f, item_seq)?;
        Ok(0)
    })
}

/// `pg_md_provider_update` numbered `item_seq` by the application (see
/// `pg_md_provider_refresh_numbered`).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_update_numbered(
    provider: *mut pg_md_provider,
    item: *const c_char,
    fields: *const pg_md_field,
    count: usize,
    item_seq: u32,
) -> i32 {
    with_provider(provider, |p| {
        let item = text(item, "item")?;
        let f = fields_in(p.provider.dictionary(), fields, count)?;
        p.provider.update_numbered(item, &f, item_seq)?;
        Ok(0)
    })
}

/// Publishes `item`'s state: `PG_MD_STALE` or `PG_MD_CLOSED`, with `reason` for people (NULL:
/// none).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_status(
    provider: *mut pg_md_provider,
    item: *const c_char,
    state: i32,
    reason: *const c_char,
) -> i32 {
    with_provider(provider, |p| {
        let item = text(item, "item")?;
        let reason = if reason.is_null() {
            ""
        } else {
            text(reason, "text")?
        };
        let state = match state {
            s if s == pg_md_state::PG_MD_STALE as i32 => ItemState::Stale,
            s if s == pg_md_state::PG_MD_CLOSED as i32 => ItemState::Closed,
            other => {
                return Err(Failure::invalid(format!(
                    "state {other} is not accepted: a provider sends PG_MD_STALE or PG_MD_CLOSED"
                )))
            }
        };
        p.provider.status(item, state, reason)?;
        Ok(0)
    })
}

/// Reads image requests and answers them, flushes, runs NAK repair: call it every
/// millisecond or so. Returns the work done (0: idle).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_do_work(provider: *mut pg_md_provider) -> i32 {
    with_provider(provider, |p| {
        Ok(p.provider.do_work().min(i32::MAX as usize) as i32)
    })
}

/// The next post a client made to an item of this provider's service into `*out`: returns 1,
/// or 0 when none is waiting (posts arrive in `pg_md_provider_do_work`). Answer each once,
/// with `pg_md_provider_accept`, `pg_md_provider_refuse` or `pg_md_provider_publish_post`;
/// `*out`'s pointers are valid until the next call on this provider.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_poll_post(
    provider: *mut pg_md_provider,
    out: *mut pg_md_post,
) -> i32 {
    with_provider(provider, |p| {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        if p.posts.len() >= MAX_C_POSTS {
            return Ok(0);
        }
        let Some(post) = p.provider.poll_post() else {
            return Ok(0);
        };
        p.next_post += 1;
        let id = p.next_post;
        let post = p.posts.entry(id).or_insert(post);
        p.fields.clear();
        p.fields
            .extend(post.fields().iter().map(|f| c_field(f, &p.names)));
        let c = pg_md_post {
            id,
            user: post.user.as_ptr().cast(),
            user_length: post.user.len(),
            item: post.item.as_ptr().cast(),
            item_length: post.item.len(),
            refresh: i32::from(post.refresh),
            fields: p.fields.as_ptr(),
            field_count: p.fields.len(),
        };
        // SAFETY: `out` is not NULL (checked) and points to a `pg_md_post` of the caller's.
        unsafe { out.write(c) };
        Ok(1)
    })
}

/// Takes the post `id` out of those handed to C.
fn take_post(p: &mut ProviderObject, id: u64) -> Result<Post, Failure> {
    p.posts.remove(&id).ok_or_else(|| {
        Failure::invalid(format!(
            "post {id} is not waiting for an answer: answer each post of \
             pg_md_provider_poll_post once"
        ))
    })
}

/// Accepts post `id` (publishing it is the application's call).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_accept(provider: *mut pg_md_provider, id: u64) -> i32 {
    with_provider(provider, |p| {
        let post = take_post(p, id)?;
        p.provider.accept(&post);
        Ok(0)
    })
}

/// Refuses post `id`, with `reason` for the poster (NULL: none; at most 255 bytes are sent).
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_refuse(
    provider: *mut pg_md_provider,
    id: u64,
    reason: *const c_char,
) -> i32 {
    with_provider(provider, |p| {
        let reason = if reason.is_null() {
            ""
        } else {
            text(reason, "reason")?
        };
        let post = take_post(p, id)?;
        p.provider.refuse(&post, reason);
        Ok(0)
    })
}

/// Publishes post `id` (an update of its item, or a refresh for a full image) and accepts
/// it; one the provider cannot publish is refused to the poster with the reason, and the
/// call fails as `pg_md_provider_update` would.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_publish_post(
    provider: *mut pg_md_provider,
    id: u64,
) -> i32 {
    with_provider(provider, |p| {
        let post = take_post(p, id)?;
        p.provider.publish_post(&post)?;
        Ok(0)
    })
}

/// Closes the provider's session (distributors see it go) and frees it.
#[no_mangle]
pub unsafe extern "C" fn pg_md_provider_free(provider: *mut pg_md_provider) -> i32 {
    free::<ProviderObject>(provider as usize, Kind::MdProvider, "provider")
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
fn tls_options(
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
fn new_consumer(
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
fn consumer_handle(consumer: AnyConsumer, out: *mut *mut pg_md_consumer) -> Result<i32, Failure> {
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
unsafe fn consumer_request(
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
        super::put_optional(request, id)?;
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
        Ok(standby::plain(c, "pg_md_consumer_snapshot")?.snapshot(s, p)?)
    })
}

/// Pauses request `request` (0: every request open now): the distributor keeps its items'
/// latest state only until `pg_md_consumer_resume`; kept across reconnections.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_pause(consumer: *mut pg_md_consumer, request: u32) -> i32 {
    with_consumer(consumer, |c| {
        standby::plain(&mut c.consumer, "pg_md_consumer_pause")?.pause(request)?;
        Ok(0)
    })
}

/// Resumes request `request` (0: every paused one): a refresh (or status) per item that
/// changed meanwhile, then its updates again.
#[no_mangle]
pub unsafe extern "C" fn pg_md_consumer_resume(consumer: *mut pg_md_consumer, request: u32) -> i32 {
    with_consumer(consumer, |c| {
        standby::plain(&mut c.consumer, "pg_md_consumer_resume")?.resume(request)?;
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

/// The dictionary's names as C strings, by field id.
fn c_names(dictionary: &Dictionary) -> HashMap<u16, CString> {
    dictionary
        .iter()
        .filter_map(|d| CString::new(d.name.clone()).ok().map(|c| (d.fid, c)))
        .collect()
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

/// An ACK's code as C sees it.
fn c_ack_code(c: AckCode) -> pg_md_ack_code {
    match c {
        AckCode::Accepted => pg_md_ack_code::PG_MD_ACCEPTED,
        AckCode::Refused => pg_md_ack_code::PG_MD_REFUSED,
        AckCode::NotEntitled => pg_md_ack_code::PG_MD_NOT_ENTITLED_TO_POST,
        AckCode::ServiceDown => pg_md_ack_code::PG_MD_SERVICE_DOWN,
        AckCode::UnknownService => pg_md_ack_code::PG_MD_UNKNOWN_SERVICE,
        AckCode::Busy => pg_md_ack_code::PG_MD_BUSY,
        AckCode::Timeout => pg_md_ack_code::PG_MD_TIMEOUT,
        AckCode::Invalid => pg_md_ack_code::PG_MD_INVALID,
    }
}

/// An item state as C sees it.
fn c_state(s: ItemState) -> pg_md_state {
    match s {
        ItemState::Ok => pg_md_state::PG_MD_OK,
        ItemState::Stale => pg_md_state::PG_MD_STALE,
        ItemState::Closed => pg_md_state::PG_MD_CLOSED,
        ItemState::NotEntitled => pg_md_state::PG_MD_NOT_ENTITLED,
        ItemState::NotFound => pg_md_state::PG_MD_NOT_FOUND,
        ItemState::Rejected => pg_md_state::PG_MD_REJECTED,
    }
}

/// One received field for C: strings point into the consumer's buffer.
fn c_field(f: Field<'_>, names: &HashMap<u16, CString>) -> pg_md_field {
    let mut out = pg_md_field {
        fid: f.fid,
        r#type: 0,
        name: names.get(&f.fid).map_or(std::ptr::null(), |n| n.as_ptr()),
        int_value: 0,
        exponent: 0,
        enum_value: 0,
        time_ns: 0,
        string: std::ptr::null(),
        string_length: 0,
    };
    match f.value {
        Value::Int(v) => {
            out.r#type = pg_md_type::PG_MD_INT as i32;
            out.int_value = v;
        }
        Value::Price(p) => {
            out.r#type = pg_md_type::PG_MD_PRICE as i32;
            out.int_value = p.mantissa;
            out.exponent = p.exponent.into();
        }
        Value::TimeNs(t) => {
            out.r#type = pg_md_type::PG_MD_TIME as i32;
            out.time_ns = t;
        }
        Value::Enum(e) => {
            out.r#type = pg_md_type::PG_MD_ENUM as i32;
            out.enum_value = e;
        }
        Value::Str(s) => {
            out.r#type = pg_md_type::PG_MD_STRING as i32;
            out.string = s.as_ptr().cast();
            out.string_length = s.len();
        }
    }
    out
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

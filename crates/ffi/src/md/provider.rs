//! `pg_md_provider_*`: a provider of one service, its items published, its image requests
//! answered and its clients' posts handed to C.

use super::convert::{c_field, c_names};
use super::fields_in;
use super::types::*;
use crate::error::pg_status::*;
use crate::pg_context;
use crate::{check_out, free, insert, put, text, with, Failure, Kind};
use peregrine_market_data::provider::{Post, Provider, ProviderError, ProviderOptions};
use peregrine_md::model::ItemState;
use std::collections::HashMap;
use std::ffi::{c_char, CString};

#[derive(Debug)]
pub(super) struct ProviderObject {
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
pub(super) const MAX_C_POSTS: usize = 4096;

pub(super) fn with_provider(
    p: *mut pg_md_provider,
    body: impl FnOnce(&mut ProviderObject) -> Result<i32, Failure>,
) -> i32 {
    with(p as usize, Kind::MdProvider, "provider", body)
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
    crate::with_context(context, |ctx| {
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
pub(super) fn take_post(p: &mut ProviderObject, id: u64) -> Result<Post, Failure> {
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

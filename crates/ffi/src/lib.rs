//! The C ABI of Peregrine: `libperegrine.so` / `libperegrine.a` and `include/peregrine.h`.
//!
//! The header is generated from this crate by cbindgen (`cbindgen.toml`); a test fails when
//! the checked-in copy is stale (`PEREGRINE_BLESS=1 cargo test -p peregrine-ffi --test header`
//! rewrites it). The rules every function follows are in the header's preamble (the
//! `header` of `cbindgen.toml`): status codes, `pg_last_error`, handles, ownership, threads.
//!
//! Every function catches a Rust panic before it would cross into C and turns it into
//! `PG_ERROR_INTERNAL`; every handle is checked (see [`handles`]) before it is used.
// The C ABI is unsafe by nature: raw pointers in, raw pointers out. Every block says why it
// holds.
#![allow(unsafe_code)]
// C's names: pg_context, pg_message... as the header spells them.
#![allow(non_camel_case_types)]
// Each function's doc says what its pointers must be; the general rules (NULL is checked,
// outputs must point to writable memory, handles come from this library) are in the header's
// preamble rather than a `# Safety` section repeated on every function.
#![allow(clippy::missing_safety_doc)]

// In the header's order: cbindgen reads this file's items, then the modules in the order
// they are declared here (the blank lines keep rustfmt from sorting them).
mod types;

mod context;

mod publisher;

mod subscriber;

mod error;
mod failover;
mod handles;
mod md;
mod merging;

pub use context::*;
pub use publisher::*;
pub use subscriber::*;

pub use error::pg_status;
use error::{pg_status::*, Failure};
use handles::Kind;
pub use merging::{pg_merge_event, pg_merge_event_kind, pg_merging_subscriber};
use peregrine::IdleKind;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
pub use types::*;

// ---------------------------------------------------------------------------------------------
// Plumbing: every entry point runs its body under `run`, which catches panics.

/// Runs `body`, turning a failure into its code and a panic into `PG_ERROR_INTERNAL`.
#[inline(always)]
pub(crate) fn run(body: impl FnOnce() -> Result<i32, Failure>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => f.report(),
        Err(panic) => internal(&*panic),
    }
}

#[cold]
pub(crate) fn internal(panic: &(dyn std::any::Any + Send)) -> i32 {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string());
    Failure::new(
        PG_ERROR_INTERNAL,
        format!("internal error in Peregrine (please report it): {what}"),
    )
    .report()
}

/// Frees the object behind `handle` (of `kind`, stored as a `T`).
pub(crate) fn free<T>(handle: usize, kind: Kind, what: &str) -> i32 {
    run(|| {
        // SAFETY: each kind is inserted with its own type only (ContextObject,
        // PublisherObject, SubscriberObject), which the callers below name; the header tells
        // callers to free a handle while no other thread uses it.
        let object =
            unsafe { handles::remove::<T>(handle, kind) }.map_err(|e| Failure::handle(e, what))?;
        drop(object);
        Ok(0)
    })
}

/// Runs `body` on the object behind `handle`; a panic poisons the handle.
#[inline(always)]
pub(crate) fn with<T>(
    handle: usize,
    kind: Kind,
    what: &str,
    body: impl FnOnce(&mut T) -> Result<i32, Failure>,
) -> i32 {
    let r = run(|| {
        // SAFETY: the kind fixes the type (ContextObject, PublisherObject, SubscriberObject:
        // each kind is inserted with its own type only), and the header tells callers to use a
        // handle from one thread at a time, so this is the only reference.
        let object =
            unsafe { handles::get::<T>(handle, kind) }.map_err(|e| Failure::handle(e, what))?;
        body(object)
    });
    if r == PG_ERROR_INTERNAL as i32 {
        handles::poison(handle, kind);
    }
    r
}

/// [`with`] for a publisher handle.
#[inline(always)]
pub(crate) fn with_publisher(
    publisher: *mut pg_publisher,
    body: impl FnOnce(&mut PublisherObject) -> Result<i32, Failure>,
) -> i32 {
    with(publisher as usize, Kind::Publisher, "publisher", body)
}

/// [`with`] for a subscriber handle.
#[inline(always)]
pub(crate) fn with_subscriber(
    subscriber: *mut pg_subscriber,
    body: impl FnOnce(&mut SubscriberObject) -> Result<i32, Failure>,
) -> i32 {
    with(subscriber as usize, Kind::Subscriber, "subscriber", body)
}

/// [`with`] for a context handle.
#[inline(always)]
pub(crate) fn with_context(
    context: *mut pg_context,
    body: impl FnOnce(&mut ContextObject) -> Result<i32, Failure>,
) -> i32 {
    with(context as usize, Kind::Context, "context", body)
}

/// The UTF-8 text at `p` (NUL-terminated).
///
/// The caller of the entry point promises `p` is NULL or a NUL-terminated string.
pub(crate) fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::null(what));
    }
    // SAFETY: non-null, and the caller passes a NUL-terminated string (header preamble); it
    // lives for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|e| Failure::invalid(format!("{what} is not UTF-8 ({e}): give UTF-8 text")))
}

/// Checks that `out` can take a value (not NULL, aligned): constructors check before they
/// make the object, so a bad output pointer leaks nothing.
pub(crate) fn check_out<T>(out: *mut T, what: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(what));
    }
    if !out.is_aligned() {
        return Err(Failure::invalid(format!(
            "{what} is not aligned for its type"
        )));
    }
    Ok(())
}

/// Writes `value` to the caller's `out`.
pub(crate) fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Failure> {
    check_out(out, what)?;
    // SAFETY: non-null and aligned; the caller promises it points to writable memory of the
    // type (header preamble).
    unsafe { out.write(value) };
    Ok(())
}

/// Writes `value` to `out` when `out` is not NULL.
#[inline(always)]
pub(crate) fn put_optional<T>(out: *mut T, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Ok(());
    }
    put(out, value, "the output pointer")
}

pub(crate) fn idle_kind(idle: i32) -> Result<IdleKind, Failure> {
    Ok(match idle {
        0 => IdleKind::Spin,
        1 => IdleKind::Yield,
        2 => IdleKind::Backoff,
        3 => IdleKind::Block,
        other => {
            return Err(Failure::invalid(format!(
                "idle strategy {other} is unknown: give PG_IDLE_SPIN (0), PG_IDLE_YIELD (1), PG_IDLE_BACKOFF (2) or PG_IDLE_BLOCK (3)"
            )))
        }
    })
}

pub(crate) fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{fffd}")).expect("NULs replaced")
}

pub(crate) fn insert<T>(kind: Kind, object: T) -> Result<usize, Failure> {
    handles::insert(kind, Box::new(object)).map_err(|e| Failure::handle(e, "a new handle"))
}

// ---------------------------------------------------------------------------------------------
// Library

/// The library's version, a static string ("0.1.0").
#[no_mangle]
pub extern "C" fn pg_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the version has no NUL"),
        };
    VERSION.as_ptr()
}

/// The message of the last call that failed on this thread (an empty string if none did).
/// The string belongs to the thread and stays valid until its next `pg_last_error` call.
#[no_mangle]
pub extern "C" fn pg_last_error() -> *const c_char {
    catch_unwind(error::last_error_ptr).unwrap_or(c"internal error".as_ptr())
}

/// The name of a status code ("PG_ERROR_BACK_PRESSURED"), a static string; "PG_UNKNOWN" for a
/// negative value that is not a code.
#[no_mangle]
pub extern "C" fn pg_status_name(status: i32) -> *const c_char {
    error::status_name(status).as_ptr()
}

#[cfg(test)]
mod tests;

//! `pg_context_*`: contexts, their configuration and their resolver.

use super::handles::Kind;
use crate::types::*;
use crate::{check_out, free, insert, put, run, text};
use peregrine::{Config, Context};
use std::ffi::c_char;

/// Makes a context with the defaults (one host, no configuration file) into `*out`.
/// A context may be used from several threads at once.
#[no_mangle]
pub unsafe extern "C" fn pg_context_new(out: *mut *mut pg_context) -> i32 {
    run(|| {
        check_out(out, "out")?;
        let h = insert(
            Kind::Context,
            ContextObject {
                context: Context::new(),
            },
        )?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Makes a context configured by the environment into `*out`: the TOML file named by
/// `PEREGRINE_CONFIG` if set, then `PEREGRINE_<TRANSPORT>_<KEY>` variables over it
/// (docs/configuration.md). Fails with `PG_ERROR_CONFIG` naming a bad key or value.
#[no_mangle]
pub unsafe extern "C" fn pg_context_from_env(out: *mut *mut pg_context) -> i32 {
    run(|| {
        check_out(out, "out")?;
        let context = Context::from_env()?;
        let h = insert(Kind::Context, ContextObject { context })?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Makes a context configured by `toml` (the text of a configuration file,
/// docs/configuration.md) into `*out`. Fails with `PG_ERROR_CONFIG` naming a bad key or value.
#[no_mangle]
pub unsafe extern "C" fn pg_context_with_config(
    toml: *const c_char,
    out: *mut *mut pg_context,
) -> i32 {
    run(|| {
        let toml = text(toml, "toml")?;
        check_out(out, "out")?;
        let context = Context::with_config(Config::from_toml(toml, "pg_context_with_config")?);
        let h = insert(Kind::Context, ContextObject { context })?;
        put(out, h as *mut pg_context, "out")?;
        Ok(0)
    })
}

/// Frees a context. Publishers and subscribers made from it stay valid (they hold what they
/// need); topic resolution stops when the last of them is freed.
#[no_mangle]
pub unsafe extern "C" fn pg_context_free(context: *mut pg_context) -> i32 {
    free::<ContextObject>(context as usize, Kind::Context, "context")
}

// ---------------------------------------------------------------------------------------------
// Publishers

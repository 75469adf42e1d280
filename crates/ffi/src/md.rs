//! The market data tier in the C ABI: a provider (`pg_md_provider_*`) and a consumer
//! (`pg_md_consumer_*`) over `peregrine-market-data`, with the handle, status and
//! `pg_last_error` conventions of the messaging API (the header's preamble).

use super::{text, Failure};
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Field, Price, Value};
use std::ffi::c_char;

// In the order of the C header (cbindgen reads them in this order).
mod types;

mod provider;

mod consumer;

mod standby;

mod convert;

pub use types::*;

/// The texts of a C array of `count` NUL-terminated strings.
pub(super) fn texts<'a>(
    p: *const *const c_char,
    count: usize,
    what: &str,
) -> Result<Vec<&'a str>, Failure> {
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
pub(super) fn fields_in<'a>(
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

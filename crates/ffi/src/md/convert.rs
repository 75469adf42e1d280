//! Conversions between the C types and the library's: codes, states and fields.

use super::types::*;
use peregrine_md::codec::AckCode;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Field, ItemState, Value};
use std::collections::HashMap;
use std::ffi::CString;

/// An ACK's code as C sees it.
pub(super) fn c_ack_code(c: AckCode) -> pg_md_ack_code {
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
pub(super) fn c_state(s: ItemState) -> pg_md_state {
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
pub(super) fn c_field(f: Field<'_>, names: &HashMap<u16, CString>) -> pg_md_field {
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

/// The dictionary's names as C strings, by field id.
pub(super) fn c_names(dictionary: &Dictionary) -> HashMap<u16, CString> {
    dictionary
        .iter()
        .filter_map(|d| CString::new(d.name.clone()).ok().map(|c| (d.fid, c)))
        .collect()
}

//! The common header: a checked header has a known type and a sane length, and re-filling a
//! header from its accessors gives back the same 16 bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::header::{Header, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = Header::new_checked(data) else {
        return;
    };
    let ty = h
        .frame_type()
        .expect("a checked header has a known frame type");
    let len = h.frame_length() as usize;
    assert!((HEADER_LEN..=data.len()).contains(&len));
    assert_eq!(h.frame_bytes().len(), len);

    let mut out = [0xa5u8; HEADER_LEN];
    let mut w = Header::new_unchecked(&mut out[..]);
    w.set_frame_length(h.frame_length());
    w.fill(ty, h.flags(), h.session_id());
    assert_eq!(&out[..], &data[..HEADER_LEN]);
});

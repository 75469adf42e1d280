//! COOKIE: new_checked + parse never panic; what parses re-emits to the same bytes, and the
//! generic parser agrees.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::cookie::{CookieFrame, CookieRepr};
use peregrine_wire::FrameRepr;

fuzz_target!(|data: &[u8]| {
    // parse on an unchecked view checks first, so it must not panic either.
    let unchecked = CookieRepr::parse(&CookieFrame::new_unchecked(data));
    let Ok(frame) = CookieFrame::new_checked(data) else {
        assert!(unchecked.is_err());
        return;
    };
    let repr = CookieRepr::parse(&frame).expect("a checked frame parses");
    assert_eq!(unchecked, Ok(repr));
    let len = repr.buffer_len();
    assert!(len <= data.len());
    let mut out = vec![0xa5u8; len];
    repr.emit(&mut CookieFrame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..len]);
    assert_eq!(FrameRepr::parse(data), Ok(FrameRepr::Cookie(repr)));
});

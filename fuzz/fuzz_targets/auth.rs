//! AUTH: new_checked + parse never panic; what parses re-emits to the same bytes, the generic
//! parser agrees; and opening any datagram with a key never panics and accepts only what that
//! key sealed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_proto::auth::AuthKey;
use peregrine_wire::auth::{AuthFrame, AuthRepr};
use peregrine_wire::FrameRepr;

fuzz_target!(|data: &[u8]| {
    let unchecked = AuthRepr::parse(&AuthFrame::new_unchecked(data));
    if let Ok(frame) = AuthFrame::new_checked(data) {
        let repr = AuthRepr::parse(&frame).expect("a checked frame parses");
        assert_eq!(unchecked, Ok(repr));
        let len = repr.buffer_len();
        let mut out = vec![0xa5u8; len];
        repr.emit(&mut AuthFrame::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &data[..len]);
        assert_eq!(FrameRepr::parse(data), Ok(FrameRepr::Auth(repr)));
    } else {
        assert!(unchecked.is_err());
    }
    let key = AuthKey::new([0x42; 32]);
    // A forgery never opens; what the key sealed always does, to exactly its frames.
    assert!(key.open(data).is_err() || data.len() >= 32);
    let mut sealed = Vec::new();
    key.seal_into(data, &mut sealed);
    let opened = key.open(&sealed).expect("a sealed datagram opens");
    assert_eq!(&opened[..data.len()], data);
});

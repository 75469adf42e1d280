//! The failover header: parse never panics; what parses re-emits to the same bytes, and the
//! checked view agrees with it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::failover::{FailoverMessage, FailoverRepr, FAILOVER_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok((repr, msg)) = FailoverRepr::parse(data) else {
        assert!(FailoverMessage::new_checked(data).is_err());
        return;
    };
    let view = FailoverMessage::new_checked(data).expect("what parses checks");
    assert_eq!((view.group_id(), view.sequence()), (repr.group_id, repr.sequence));
    assert_eq!(view.message(), msg);
    let mut out = vec![0xa5u8; FAILOVER_HEADER_LEN];
    repr.emit(&mut out);
    out.extend_from_slice(msg);
    assert_eq!(&out[..], data);
});

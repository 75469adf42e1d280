//! DATA and PAD: new_checked + parse never panic; what parses re-emits to the same bytes (for
//! PAD, the fixed part: its filler is not represented), and the generic parser agrees.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::data::{DataFrame, DataRepr, PadRepr, DATA_HEADER_LEN};
use peregrine_wire::FrameRepr;

fuzz_target!(|data: &[u8]| {
    // parse on an unchecked view checks first, so it must not panic either.
    let unchecked = DataRepr::parse(&DataFrame::new_unchecked(data));
    let Ok(frame) = DataFrame::new_checked(data) else {
        assert!(unchecked.is_err());
        return;
    };
    let len = frame.frame_length() as usize;
    let mut out = vec![0xa5u8; len];
    if frame.is_pad() {
        let repr = PadRepr::parse(&frame).expect("a checked PAD frame parses");
        assert_eq!(repr.buffer_len(), len);
        repr.emit(&mut DataFrame::new_unchecked(&mut out[..]));
        assert_eq!(&out[..DATA_HEADER_LEN], &data[..DATA_HEADER_LEN]);
        assert!(out[DATA_HEADER_LEN..].iter().all(|&b| b == 0));
        assert_eq!(FrameRepr::parse(data), Ok(FrameRepr::Pad(repr)));
    } else {
        let repr = DataRepr::parse(&frame).expect("a checked DATA frame parses");
        assert_eq!(unchecked, Ok(repr));
        assert_eq!(repr.buffer_len(), len);
        repr.emit(&mut DataFrame::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &data[..len]);
        assert_eq!(FrameRepr::parse(data), Ok(FrameRepr::Data(repr)));
    }
});

//! A datagram of packed frames: the iterator yields frames at 8-byte aligned offsets and stops
//! at the first error; every frame that parses re-emits to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::data::DATA_HEADER_LEN;
use peregrine_wire::header::Frames;
use peregrine_wire::{FrameRepr, FrameType, FRAME_ALIGNMENT};

fuzz_target!(|data: &[u8]| {
    let base = data.as_ptr() as usize;
    let mut frames = Frames::new(data);
    let mut count = 0;
    while let Some(item) = frames.next() {
        let (ty, bytes) = match item {
            Ok(f) => f,
            Err(_) => {
                assert!(frames.next().is_none(), "nothing is yielded after an error");
                break;
            }
        };
        count += 1;
        assert!(count <= data.len() / 16, "more frames than headers fit");
        assert_eq!((bytes.as_ptr() as usize - base) % FRAME_ALIGNMENT, 0);
        let Ok(repr) = FrameRepr::parse(bytes) else {
            continue;
        };
        assert_eq!(repr.frame_type(), ty);
        assert_eq!(repr.buffer_len(), bytes.len());
        let mut out = vec![0xa5u8; bytes.len()];
        repr.emit(&mut out);
        let compared = if ty == FrameType::Pad {
            DATA_HEADER_LEN
        } else {
            bytes.len()
        };
        assert_eq!(&out[..compared], &bytes[..compared]);
    }
});

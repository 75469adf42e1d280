//! The recording format (docs/recording.md): the record and segment header parsers never
//! panic, nor do the replay protocol's and the positions frame's; what parses re-emits to the same bytes (a record's header and message: the
//! zeros to 8 after a message and a padding record's filler are not read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::format::index::{parse_index, IndexEntry};
use peregrine_archive::format::positions::PositionsRepr;
use peregrine_archive::format::record::{parse_record, RecordKind};
use peregrine_archive::format::replay::{emit_end, error_len, parse_end, RequestRepr};
use peregrine_archive::format::segment_header::SegmentHeaderRepr;

fuzz_target!(|data: &[u8]| {
    if let Ok((r, payload)) = parse_record(data) {
        let mut again = Vec::new();
        r.append(&mut again, payload);
        // The header and the message (the zeros to 8 after it are not checked).
        let n = 32 + if r.kind == RecordKind::Message { payload.len() } else { 0 };
        assert_eq!(&again[..n], &data[..n]);
    }
    if let Ok(h) = SegmentHeaderRepr::parse(data) {
        let b = h.emit();
        assert_eq!(&b[..], &data[..b.len()]);
    }
    // The replay protocol's request, end and error frames.
    if let Ok(r) = RequestRepr::parse(data) {
        let b = r.emit();
        assert_eq!(&b[..], &data[..b.len()]);
    }
    if let Ok(n) = parse_end(data) {
        assert_eq!(&emit_end(n)[..], &data[..16]);
    }
    let _ = error_len(data);
    // A segment index entry, and an index file's entries.
    if let Ok(e) = IndexEntry::parse(data) {
        assert_eq!(&e.emit()[..], &data[..32]);
    }
    let _ = parse_index(data);
    // A durable subscriber's positions frame.
    if let Ok(p) = PositionsRepr::parse(data) {
        assert_eq!(p.emit(), data);
    }
});

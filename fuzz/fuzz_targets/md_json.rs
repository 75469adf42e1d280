//! The WebSocket JSON session (peregrine-md's `json`): arbitrary text from a client, and
//! arbitrary bytes as if the core had queued them, never panic; what the session hands the core
//! is always valid binary messages, and what it hands the client is always valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_md::codec::Message;
use peregrine_md::dictionary::Dictionary;
use peregrine_md::json::{messages, JsonSession};
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let mut s = JsonSession::new(Arc::new(Dictionary::builtin()), "FEED1");
    // A login first (most inputs then reach the requests), then the input cut in two: the
    // first half as the client's text, the second as the core's bytes.
    let mut to_core = Vec::new();
    s.from_client(
        r#"{"ID":1,"Domain":"Login","Key":{"Name":"alice","Elements":{"AuthenticationToken":"a"}}}"#,
        &mut to_core,
    )
    .unwrap();
    let half = data.len() / 2;
    if let Ok(text) = std::str::from_utf8(&data[..half]) {
        let _ = s.from_client(text, &mut to_core);
    }
    for m in messages(&to_core) {
        Message::parse(m).expect("the session hands the core valid messages");
    }
    let mut out = String::new();
    if s.to_client(&data[half..], None, &mut out) > 0 {
        serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
    }
});

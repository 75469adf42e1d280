//! include/peregrine.h is what cbindgen makes of this crate today: the checked-in header
//! cannot drift from the library. `PEREGRINE_BLESS=1` rewrites it instead of failing.

use std::path::Path;

#[test]
fn the_checked_in_header_is_the_generated_one() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/peregrine.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    if std::env::var("PEREGRINE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&header, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/peregrine.h is stale: the C API changed. Regenerate it with \
         `PEREGRINE_BLESS=1 cargo test -p peregrine-ffi --test header` and commit it."
    );
}

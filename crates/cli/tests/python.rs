//! The Python package (bindings/python), installed with one `pip install` of its folder into
//! a virtual environment under target/, then tested by its pytest suite, which includes a
//! Python subscriber receiving from this crate's `peregrine pub` process, the Python
//! ping-pong across processes, and the market data API (`peregrine.md`: a Python provider and
//! consumer through a `peregrine distributor` process, and examples/md_provider.py and
//! md_board.py run against one). `PEREGRINE_BIN` gives the suite this crate's binary.
//!
//! Without Python (with venv) the test says so in one line and skips; under
//! `PEREGRINE_REQUIRE_TOOLS=1` (.ci/run) that is a failure. pip fetches maturin and, when the
//! interpreter has none, pytest from PyPI.

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn the_python_package_installs_with_pip_and_passes_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    // pytest, and examples/md_ws.py's WebSocket client library.
    let Some(venv_python) = peregrine_testkit::python_with(
        &target.join("python-venv"),
        &[("pytest", "pytest"), ("websocket", "websocket-client")],
    ) else {
        return;
    };
    // One pip install of the folder, as the README says. The Rust build lands in the
    // workspace's target/python (bindings/python/.cargo/config.toml), never in the source
    // tree, so a second run rebuilds only what changed. It is built with cargo's dev profile
    // and no debug info (maturin's MATURIN_PEP517_ARGS): the suite checks behaviour and times
    // nothing, and the release build a user's pip makes took about 105 of `.ci/run`'s seconds
    // on 2 cores, this one about 55. (`.ci/run` checks the release build with clippy.)
    let in_tree = root.join("bindings/python/target");
    let in_tree_before = in_tree.exists();
    run(
        Command::new(&venv_python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(root.join("bindings/python"))
            .env("MATURIN_PEP517_ARGS", "--profile dev")
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .env_remove("CARGO_TARGET_DIR"),
        "pip install bindings/python",
    );
    if in_tree_before {
        println!(
            "{} was there before (an older build): not checked",
            in_tree.display()
        );
    } else {
        assert!(
            !in_tree.exists(),
            "pip built into the source tree: {}",
            in_tree.display()
        );
    }
    assert!(
        root.join("target/python/debug").is_dir(),
        "no build in target/python"
    );
    let out = run(
        Command::new(&venv_python)
            .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
            .arg(root.join("bindings/python/tests"))
            .env("PEREGRINE_BIN", env!("CARGO_BIN_EXE_peregrine")),
        "pytest bindings/python/tests",
    );
    assert!(
        out.contains(" passed") && !out.contains("skipped") && !out.contains("SKIPPED"),
        "every Python test runs:\n{out}"
    );
}

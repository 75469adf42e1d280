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

use std::path::{Path, PathBuf};
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
    let Some(python) =
        peregrine_testkit::program("python3", "apt-get install python3 python3-venv")
    else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    let venv: PathBuf = target.join("python-venv");
    let venv_python = venv.join("bin/python");
    if !venv_python.exists() {
        let made = Command::new(&python)
            .args(["-m", "venv", "--system-site-packages"])
            .arg(&venv)
            .output()
            .unwrap();
        if !made.status.success() {
            peregrine_testkit::skip(
                &format!(
                    "python3 cannot make a virtual environment ({}; apt-get install python3-venv)",
                    String::from_utf8_lossy(&made.stderr).trim()
                ),
                ".ci/run installs it",
            );
            return;
        }
    }
    let has_pytest = Command::new(&venv_python)
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pytest {
        run(
            Command::new(&venv_python).args(["-m", "pip", "install", "--quiet", "pytest"]),
            "pip install pytest",
        );
    }
    // examples/md_ws.py's WebSocket client library.
    let has_websocket = Command::new(&venv_python)
        .args(["-c", "import websocket"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_websocket {
        run(
            Command::new(&venv_python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "websocket-client",
            ]),
            "pip install websocket-client",
        );
    }
    // One pip install of the folder, as the README says. The Rust build lands in the
    // workspace's target/python (bindings/python/.cargo/config.toml), never in the source
    // tree, so a second run rebuilds only what changed.
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
        root.join("target/python/release").is_dir(),
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

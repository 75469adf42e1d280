//! The C examples (examples/c/), built by the system C compiler against include/peregrine.h
//! and the library cargo built for this test, and run against each other across processes:
//! a subscriber receiving and checking every byte from a publisher (over shared memory, over
//! UDP, and by topic name), the ping-pong, the C++ header check, and the README's C snippet
//! as written.
//!
//! Without a C (or C++) compiler the tests say so in one line and skip; under
//! `PEREGRINE_REQUIRE_TOOLS=1` (.ci/run) that is a failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding libperegrine.so and .a: this test's profile folder (target/debug),
/// where they are built first, once per run: `cargo test` builds a library crate's test
/// harness, not its C libraries, so this runs `cargo build` for them (cargo does not hold its
/// lock while tests run). The build must reuse what `cargo test --workspace` built, or it
/// builds much of the workspace again (about a minute of `.ci/run`), and the next `cargo test`
/// again after it:
/// - the whole workspace's libraries and examples, not `-p peregrine-ffi` nor `--lib` alone:
///   examples, as tests do, bring the dev-dependencies into the features' resolution, which
///   is then the one `cargo test --workspace` made (and it built the examples already). Either
///   way cargo built a dozen dependencies again with other features. `--tests` would do too,
///   but would build every test of the workspace for a run of this test alone;
/// - without the variables cargo sets for this test process (its package's
///   `CARGO_MANIFEST_DIR` and the like), which `cargo test` itself ran without: a build script
///   that reads one (ring's reads `CARGO_MANIFEST_DIR`) would see it change and run again,
///   and ring, rustls and everything above them would be built again.
fn lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
            let mut build = Command::new(cargo);
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(set_by_cargo_for_this_test) {
                    build.env_remove(name);
                }
            }
            build
                .args(["build", "--workspace", "--lib", "--examples"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let out = build.output().unwrap();
            assert!(
                out.status.success(),
                "cargo build --workspace --lib --examples failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                dir.join("libperegrine.so").exists(),
                "cargo build --workspace --lib --examples left no libperegrine.so in {}",
                dir.display()
            );
            dir
        })
        .clone()
}

/// The variables cargo sets for a test it runs (the cargo book, "Environment variables Cargo
/// sets for crates"), none of which a `cargo build` from a shell has.
fn set_by_cargo_for_this_test(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// Builds examples/c/`source` with `compiler` into this test's temporary folder.
fn build(compiler: &Path, source: &str, extra: &[&str]) -> PathBuf {
    build_file(compiler, &root().join("examples/c").join(source), extra)
}

/// Builds the C (or C++, `.cpp`) file `path` with `compiler` into this test's temporary
/// folder.
fn build_file(compiler: &Path, path: &Path, extra: &[&str]) -> PathBuf {
    let source = path.file_name().unwrap().to_str().unwrap();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-examples");
    std::fs::create_dir_all(&out_dir).unwrap();
    // One file per test and source: tests run in parallel and may build the same example.
    let test = std::thread::current()
        .name()
        .unwrap_or("test")
        .replace("::", "-");
    let out = out_dir.join(format!("{}-{test}", source.split('.').next().unwrap()));
    let lib = lib_dir();
    let cpp = source.ends_with(".cpp");
    let std = if cpp { "-std=c++17" } else { "-std=c11" };
    let mut cmd = Command::new(compiler);
    cmd.args([std, "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(path)
        .arg("-o")
        .arg(&out)
        .args(extra);
    if !extra.iter().any(|a| a.ends_with(".a")) {
        cmd.arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lperegrine");
    }
    let result = cmd.output().unwrap();
    assert!(
        result.status.success(),
        "{} failed on {source}:\n{}",
        compiler.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

fn cc() -> Option<PathBuf> {
    peregrine_testkit::program("cc", "apt-get install gcc")
}

/// Runs the subscriber example (`sub_uri`, `sub_topic`: "-" and a glob for topic
/// resolution), waits for its "ready", then the publisher; both must succeed, and the
/// subscriber must report every one of `count` messages of `size` bytes.
fn publisher_to_subscriber(
    cc: &Path,
    (pub_uri, pub_topic): (&str, &str),
    (sub_uri, sub_topic): (&str, &str),
    count: u64,
    size: u64,
) {
    let publisher = build(cc, "publisher.c", &[]);
    let subscriber = build(cc, "subscriber.c", &[]);
    let mut sub = Command::new(&subscriber)
        .args([sub_uri, sub_topic, &count.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(sub.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let published = Command::new(&publisher)
        .args([pub_uri, pub_topic, &count.to_string(), &size.to_string()])
        .output()
        .unwrap();
    assert!(
        published.status.success(),
        "publisher: {}{}",
        String::from_utf8_lossy(&published.stdout),
        String::from_utf8_lossy(&published.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = sub.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the subscriber did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sub.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "subscriber: {rest:?} {err}");
    assert_eq!(
        rest,
        vec![format!(
            "received {count} messages, {} bytes, lost 0",
            count * size
        )]
    );
    assert!(
        String::from_utf8_lossy(&published.stdout).starts_with(&format!(
            "published {count} messages, {} bytes",
            count * size
        )),
        "{}",
        String::from_utf8_lossy(&published.stdout)
    );
}

#[test]
fn c_publisher_to_c_subscriber_over_shared_memory() {
    let Some(cc) = cc() else { return };
    let uri = format!("ipc://c-example-{}?capacity=64k", std::process::id());
    // 300-byte messages through a 64 KiB log: the publisher waits on back-pressure, and the
    // claims go round the ring many times.
    publisher_to_subscriber(&cc, (&uri, "c.example"), (&uri, "c.example"), 20_000, 300);
}

#[test]
fn c_publisher_to_c_subscriber_over_udp() {
    let Some(cc) = cc() else { return };
    let port = 20_000 + std::process::id() % 20_000;
    let uri = format!("udp://127.0.0.1:{port}");
    publisher_to_subscriber(
        &cc,
        (&uri, "c.example.udp"),
        (&uri, "c.example.udp"),
        20_000,
        1000,
    );
}

#[test]
fn c_publisher_to_c_subscriber_by_topic_name() {
    let Some(cc) = cc() else { return };
    let topic = format!("c.example.{}.quotes", std::process::id());
    let pattern = format!("c.example.{}.*", std::process::id());
    // The subscriber by glob, the publisher by name: topic resolution finds it.
    publisher_to_subscriber(&cc, ("-", &topic), ("-", &pattern), 5000, 64);
}

/// The README's ```c blocks.
fn readme_c_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = readme.as_str();
    while let Some(start) = rest.find("\n```c\n") {
        let body = &rest[start + 6..];
        let end = body.find("\n```").expect("a closed ```c block") + 1;
        blocks.push(body[..end].to_string());
        rest = &body[end..];
    }
    blocks
}

/// The README's C snippet, as written: its declarations (the #include and the handler, up to
/// the handler's closing brace) at file scope, the rest inside `main`, built with the
/// examples' warnings as errors and run against a shared-memory folder of its own.
#[test]
fn the_readmes_c_snippet_compiles_and_runs_as_written() {
    let Some(cc) = cc() else { return };
    let blocks = readme_c_blocks();
    assert_eq!(blocks.len(), 1, "one ```c block in README.md: {blocks:?}");
    let block = &blocks[0];
    let split = block.find("\n}\n").expect("the handler's closing brace") + 3;
    let (declarations, statements) = block.split_at(split);
    let source = format!(
        "/* README.md's C snippet, made by crates/ffi/tests/c_examples.rs */\n\
         #include <stdio.h>\n{declarations}\nint main(void) {{\n{statements}    return 0;\n}}\n"
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-c");
    let shm = dir.join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let path = dir.join("readme_snippet.c");
    std::fs::write(&path, source).unwrap();
    let exe = build_file(&cc, &path, &[]);
    let out = Command::new(&exe)
        .env("PEREGRINE_SHM_DIR", &shm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0: bid 189.20\n");
}

#[test]
fn c_pingpong_across_processes() {
    let Some(cc) = cc() else { return };
    let exe = build(&cc, "pingpong.c", &[]);
    let name = format!("c-pingpong-{}", std::process::id());
    let mut pong = Command::new(&exe)
        .args(["pong", &name])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ping = Command::new(&exe)
        .args(["ping", &name, "20000", "64"])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stderr)
    );
    let out = String::from_utf8(ping.stdout).unwrap();
    let json: std::collections::BTreeMap<String, f64> = out
        .trim()
        .trim_matches(['{', '}'])
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.trim_matches('"').to_string(), v.parse().unwrap())
        })
        .collect();
    assert_eq!(json["count"], 20000.0);
    assert_eq!(json["size"], 64.0);
    assert!(json["min_ns"] > 0.0 && json["min_ns"] <= json["median_ns"]);
    assert!(json["median_ns"] <= json["p99_ns"] && json["p99_ns"] <= json["max_ns"]);
    // The ping side closing ends the pong side.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = pong.try_wait().unwrap() {
            assert!(s.success(), "the pong side failed");
            break;
        }
        assert!(Instant::now() < deadline, "the pong side did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_header_compiles_as_cpp_and_refuses_bad_handles() {
    let Some(cxx) = peregrine_testkit::program("c++", "apt-get install g++") else {
        return;
    };
    let exe = build(&cxx, "header_check.cpp", &[]);
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("from C++: ok"), "{text}");
}

#[test]
fn the_static_library_links_on_its_own() {
    let Some(cc) = cc() else { return };
    let lib = lib_dir().join("libperegrine.a");
    assert!(lib.exists(), "{} was not built", lib.display());
    let lib = lib.to_string_lossy().to_string();
    let exe = build(&cc, "subscriber.c", &[&lib, "-lpthread", "-ldl", "-lm"]);
    // Linked statically: it runs without the shared library on its path, and refuses its
    // arguments as it should.
    let out = Command::new(&exe).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    if let Some(ldd) = peregrine_testkit::program("ldd", "apt-get install libc-bin") {
        let ldd = Command::new(ldd).arg(&exe).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&ldd.stdout).contains("libperegrine.so"),
            "linked against the shared library"
        );
    }
}

#[test]
fn the_offer_loop_moves_every_message() {
    let Some(cc) = cc() else { return };
    let exe = build(&cc, "offer_loop.c", &[]);
    let out = Command::new(&exe).arg("10000").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Sequences 0..10000, each received once.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "10000 messages, sequence sum 49995000"
    );
}

/// The market data C API end to end (issue 28, item 5): the C provider (examples/c/md_provider.c)
/// publishes an item through a distributor (the library's `DistributorServer`, in this
/// process), and the C consumer (examples/c/md_consumer.c) prints its image and every update
/// with exactly the published prices; the provider's bad input is refused with the field named.
#[test]
fn c_market_data_provider_to_c_consumer_through_a_distributor() {
    use peregrine_market_data::distributor::SettingsOverrides;
    let Some(cc) = cc() else { return };
    let provider = build(&cc, "md_provider.c", &[]);
    let consumer = build(&cc, "md_consumer.c", &[]);
    let pid = std::process::id();
    let group = format!("239.255.96.{}", 1 + pid % 250);
    let port = 30_000 + (pid % 7919) * 2 % 30_000;
    let backbone = format!("mcast://{group}:{port}");
    let requests = format!("mcast://{group}:{}", port + 1);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-md-{pid}"));
    let server = InProcessDistributor::start(
        &dir,
        SettingsOverrides {
            backbone: Some(backbone.clone()),
            requests: Some(requests.clone()),
            ..Default::default()
        },
    );
    let addr = server.addr.clone();
    // The consumer first, then the provider (20 updates), once the consumer's request is open:
    // the distributor has answered it (ZZZ.O not entitled, AAA.O not in the cache yet).
    let mut cons = Command::new(&consumer)
        .args([addr.as_str(), "alice", "a", "FEED1", "21", "AAA.O", "ZZZ.O"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = {
        let stdout = cons.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if line_tx.send(l).is_err() {
                    break;
                }
            }
        })
    };
    let mut early = Vec::new();
    while !early.iter().any(|l: &String| l.starts_with("STATUS ZZZ.O")) {
        match lines_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => early.push(l),
            Err(e) => panic!("the consumer's request was not answered ({e}): {early:?}"),
        }
    }
    let prov = Command::new(&provider)
        .args([
            backbone.as_str(),
            requests.as_str(),
            "FEED1",
            "AAA.O",
            "20",
            "2",
        ])
        .output()
        .unwrap();
    let prov_out = String::from_utf8_lossy(&prov.stdout).to_string();
    assert!(
        prov.status.success(),
        "md_provider: {prov_out}{}",
        String::from_utf8_lossy(&prov.stderr)
    );
    assert!(
        prov_out.contains(
            "refused: item AAA.O: field BID (fid 22) is a price in the dictionary, not a int"
        ),
        "{prov_out}"
    );
    assert!(
        prov_out.contains("refused: item AAA.O: item_seq 0 is not after the last one sent (20)"),
        "{prov_out}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = cons.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the consumer did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    let out: String = early
        .into_iter()
        .chain(lines_rx.try_iter())
        .map(|l| l + "\n")
        .collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut cons.stderr.take().unwrap(), &mut err).unwrap();
    drop(server);
    assert!(status.success(), "md_consumer: {out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let mut want = vec![
        "STATUS ZZZ.O not-entitled \"user alice may not see ZZZ.O\"".to_string(),
        "REFRESH AAA.O BID=189.2100 ASK=189.2200 BIDSIZE=300 DSPLY_NAME=\"AAA INC\"".to_string(),
    ];
    for i in 1..=20 {
        want.push(format!("UPDATE AAA.O BID=189.{:04}", 2100 + i));
    }
    // The not-entitled answer comes first or after the image, as the distributor handles the
    // OPEN's names; everything else in order.
    let mut got: Vec<String> = lines
        .iter()
        .filter(|l| !l.starts_with("STATUS AAA.O"))
        .map(|l| l.to_string())
        .collect();
    got.sort_by_key(|l| !l.starts_with("STATUS"));
    assert_eq!(got, want, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Posting from C: examples/c/md_post.c posts a price to an item through a distributor, the C
/// provider (examples/c/md_provider.c) takes the post and publishes it, and the poster gets
/// one `PG_MD_ACK`: accepted, or `invalid` with the provider's reason for an item it has no
/// image of.
#[test]
fn a_c_post_reaches_the_c_provider_and_is_answered() {
    use peregrine_market_data::distributor::SettingsOverrides;
    let Some(cc) = cc() else { return };
    let provider = build(&cc, "md_provider.c", &[]);
    let consumer = build(&cc, "md_consumer.c", &[]);
    let poster = build(&cc, "md_post.c", &[]);
    let pid = std::process::id();
    let group = format!("239.255.96.{}", 1 + (pid + 101) % 250);
    let port = 30_000 + ((pid % 7919) * 2 + 2) % 30_000;
    let backbone = format!("mcast://{group}:{port}");
    let requests = format!("mcast://{group}:{}", port + 1);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-md-post-{pid}"));
    let server = InProcessDistributor::start(
        &dir,
        SettingsOverrides {
            backbone: Some(backbone.clone()),
            requests: Some(requests.clone()),
            ..Default::default()
        },
    );
    let addr = server.addr.clone();
    // The provider: its image, no update, then 30 s answering (it is killed before).
    let mut prov = Command::new(&provider)
        .args([&backbone, &requests, "FEED1", "AAA.O", "0", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A consumer that got the image proves the distributor has the provider (and its service
    // is up): no post below can find it down.
    let image = Command::new(&consumer)
        .args([addr.as_str(), "alice", "a", "FEED1", "1", "AAA.O"])
        .output()
        .unwrap();
    assert!(
        image.status.success(),
        "{}{}",
        String::from_utf8_lossy(&image.stdout),
        String::from_utf8_lossy(&image.stderr)
    );
    let post = |item: &str| {
        Command::new(&poster)
            .args([addr.as_str(), "alice", "a", "FEED1", item, "1893000", "-4"])
            .output()
            .unwrap()
    };
    let ok = post("AAA.O");
    let ok_out = String::from_utf8_lossy(&ok.stdout).to_string();
    assert!(
        ok.status.success(),
        "{ok_out}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(ok_out.trim(), "ACK AAA.O accepted");
    let bad = post("AAA.NEW");
    let bad_out = String::from_utf8_lossy(&bad.stdout).to_string();
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{bad_out}{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        bad_out.starts_with("NACK AAA.NEW invalid: ") && bad_out.contains("AAA.NEW"),
        "{bad_out}"
    );
    let _ = prov.kill();
    let out = prov.wait_with_output().unwrap();
    let prov_out = String::from_utf8_lossy(&out.stdout);
    assert!(
        prov_out.contains("post AAA.O from alice: published"),
        "{prov_out}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Warm standby from C (`pg_md_consumer_new_warm`, examples/c/md_standby.c): logged in to
/// two distributors of one backbone, the consumer delivers from the first and stands by on the
/// second; the first stops and the standby takes over with no item stale, no `item_seq` twice
/// or backwards, and the stream carried on to its last update.
#[test]
fn a_c_warm_standby_consumer_takes_over_with_nothing_stale_and_nothing_twice() {
    use peregrine_market_data::distributor::SettingsOverrides;
    use peregrine_market_data::provider::{Provider, ProviderOptions};
    use peregrine_md::model::{Field, Value};
    let Some(cc) = cc() else { return };
    let standby = build(&cc, "md_standby.c", &[]);
    let pid = std::process::id();
    let group = format!("239.255.96.{}", 1 + (pid + 53) % 250);
    let port = 30_000 + ((pid % 7919) * 2 + 6) % 30_000;
    let backbone = format!("mcast://{group}:{port}");
    let requests = format!("mcast://{group}:{}", port + 1);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-md-standby-{pid}"));
    let overrides = || SettingsOverrides {
        backbone: Some(backbone.clone()),
        requests: Some(requests.clone()),
        ..Default::default()
    };
    let first = InProcessDistributor::start(&dir.join("1"), overrides());
    let second = InProcessDistributor::start(&dir.join("2"), overrides());
    let mut prov = Provider::with_options(
        &peregrine_market_data::Context::new(),
        ProviderOptions {
            requests: Some(requests.clone()),
            ..ProviderOptions::new("FEED1", &backbone)
        },
    )
    .unwrap();
    let bid = |k: i64| [Field::new(22, Value::price(18_900 + k, -2))];
    prov.refresh("AAA.O", &bid(0)).unwrap();
    let mut cons = Command::new(&standby)
        .args([
            &first.addr,
            &second.addr,
            "alice",
            "a",
            "FEED1",
            "20",
            "AAA.O",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = {
        let stdout = cons.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if line_tx.send(l).is_err() {
                    break;
                }
            }
        })
    };
    let mut lines: Vec<String> = Vec::new();
    // Waits (the provider working meanwhile) for a line equal to `want`.
    let wait_for = |prov: &mut Provider, lines: &mut Vec<String>, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !lines.iter().any(|l| l == want) {
            assert!(Instant::now() < deadline, "no {want:?}: {lines:?}");
            prov.do_work();
            if let Ok(l) = lines_rx.recv_timeout(Duration::from_millis(10)) {
                lines.push(l);
            }
        }
    };
    wait_for(&mut prov, &mut lines, "STANDING BY");
    for k in 1..=10 {
        prov.update("AAA.O", &bid(k)).unwrap();
    }
    wait_for(&mut prov, &mut lines, "UPDATE AAA.O seq=10");
    drop(first);
    wait_for(&mut prov, &mut lines, "FAILED OVER");
    for k in 11..=20 {
        prov.update("AAA.O", &bid(k)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        prov.do_work();
        if let Some(s) = cons.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer did not finish: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    reader.join().unwrap();
    lines.extend(lines_rx.try_iter());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut cons.stderr.take().unwrap(), &mut err).unwrap();
    drop(second);
    let out = lines.join("\n");
    assert!(status.success(), "md_standby: {out}\n{err}");
    let seqs: Vec<u32> = lines
        .iter()
        .filter_map(|l| l.split_once(" seq=").map(|(_, n)| n.parse().unwrap()))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "an item_seq twice or backwards: {out}"
    );
    assert_eq!(seqs.last(), Some(&20), "{out}");
    assert!(!out.contains(" stale "), "an item went stale: {out}");
    assert_eq!(
        lines.iter().filter(|l| *l == "FAILED OVER").count(),
        1,
        "{out}"
    );
    assert!(out.contains("failovers=1 "), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The C consumer over TLS (`pg_md_consumer_new_tls`, examples/c/md_consumer.c with
/// PEREGRINE_TLS_CA): it logs in and opens through a TLS distributor whose certificate chains
/// to the CA it is given; given another CA it is refused with PG_ERROR_REFUSED naming why.
#[test]
fn the_c_consumer_logs_in_over_tls_and_refuses_a_certificate_it_cannot_verify() {
    use peregrine_market_data::distributor::SettingsOverrides;
    use peregrine_testkit::pki::TestCa;
    let Some(cc) = cc() else { return };
    let consumer = build(&cc, "md_consumer.c", &[]);
    let pid = std::process::id();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-md-tls-{pid}"));
    let ca = TestCa::new(&dir, "ca");
    TestCa::new(&dir, "other");
    let (crt, key) = ca.issue("md", &["127.0.0.1"]);
    let group = format!("239.255.96.{}", 1 + (pid + 7) % 250);
    let port = 30_000 + ((pid % 7919) * 2 + 2) % 30_000;
    let server = InProcessDistributor::start(
        &dir,
        SettingsOverrides {
            backbone: Some(format!("mcast://{group}:{port}")),
            tls_cert: Some(crt),
            tls_key: Some(key),
            ..Default::default()
        },
    );
    let addr = server.addr.clone();
    let run = |ca: &str| {
        Command::new(&consumer)
            .args([addr.as_str(), "alice", "a", "FEED1", "0", "AAA.O"])
            .env("PEREGRINE_TLS_CA", dir.join(ca))
            .output()
            .unwrap()
    };
    let ok = run("ca.crt");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = run("other.crt");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("UnknownIssuer") && err.contains("PG_ERROR_REFUSED"),
        "{err}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A distributor in this process (the library's `DistributorServer`) on a free port, serving
/// alice (token "a", items AAA.*) from `dir`, until the returned flag is set.
struct InProcessDistributor {
    addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    serving: Option<std::thread::JoinHandle<()>>,
}

impl InProcessDistributor {
    fn start(
        dir: &Path,
        overrides: peregrine_market_data::distributor::SettingsOverrides,
    ) -> InProcessDistributor {
        use peregrine_market_data::distributor::{
            DistributorServer, DistributorSettings, SettingsOverrides,
        };
        std::fs::create_dir_all(dir).unwrap();
        let users = dir.join("users.toml");
        // The SHA-256 of "a".
        std::fs::write(
            &users,
            "[users.alice]\ntoken_sha256 = \"ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb\"\nitems = [\"AAA.*\"]\npost = [\"AAA.*\"]\n",
        )
        .unwrap();
        let settings = DistributorSettings::resolve(&SettingsOverrides {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            users: Some(users.clone()),
            ..overrides
        })
        .unwrap();
        let user_table = peregrine_md::distributor::Users::load(&users).unwrap();
        let mut server =
            DistributorServer::bind(&peregrine_market_data::Context::new(), settings, user_table)
                .unwrap();
        let addr = server.local_addr().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let serving = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                server
                    .run(&|| stop.load(std::sync::atomic::Ordering::Relaxed))
                    .unwrap();
            })
        };
        InProcessDistributor {
            addr,
            stop,
            serving: Some(serving),
        }
    }
}

impl Drop for InProcessDistributor {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.serving.take() {
            let _ = t.join();
        }
    }
}

/// A durable subscriber from C (`pg_merging_subscriber_new` with a durable name,
/// examples/c/durable.c) over a recording this test makes (a `peregrine_archive::Recorder` in
/// a thread, of a publisher of this process): a new name takes messages 0-9 and exits (its
/// position kept as it is freed); started again after 10 more were sent without it, it prints
/// 10 to 19 from the recording, then 20 to 24 live, each once, in order.
#[test]
fn a_durable_subscriber_in_c_resumes_where_it_stood() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let Some(cc) = cc() else { return };
    let exe = build(&cc, "durable.c", &[]);
    let pid = std::process::id();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-durable-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    let topic = format!("c.durable.{pid}");
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = {
        let (dir, topic, stop) = (dir.clone(), topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let ctx = peregrine::Context::new();
            let opts = peregrine_archive::WriterOptions {
                durability: peregrine_archive::Durability::None,
                ..Default::default()
            };
            let mut rec =
                peregrine_archive::Recorder::new(&ctx, &dir, &[topic.as_str()], opts).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let n = rec.poll(1024);
                rec.idle(n);
            }
            rec.close().unwrap();
        })
    };
    let ctx = peregrine::Context::new();
    let mut publisher = ctx.publish(&topic).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while publisher.subscriber_count() == 0 {
        assert!(Instant::now() < deadline, "the recorder never attached");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut sent = 0u64;
    let mut send = |n: u64| {
        for _ in 0..n {
            while publisher.offer(format!("m{sent}").as_bytes()).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            sent += 1;
        }
        let _ = publisher.flush();
    };
    let recorded = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let count: usize = peregrine_archive::folder::recordings_of(&dir, &topic)
                .unwrap()
                .iter()
                .map(|r| {
                    let mut c = r.cursor();
                    let mut k = 0;
                    while let Some(e) = c.next_entry() {
                        k += usize::from(matches!(e, Ok(peregrine_archive::Entry::Message { .. })));
                    }
                    k
                })
                .sum();
            if count >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{count} of {n} recorded");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Runs the example for `count` messages, sending `n` once it has subscribed: its lines.
    let run = |count: u64, n: u64, send: &mut dyn FnMut(u64)| -> Vec<String> {
        let mut child = Command::new(&exe)
            .args([
                topic.as_str(),
                dir.to_str().unwrap(),
                "c-risk",
                &count.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "subscribed");
        send(n);
        let out: Vec<String> = lines.map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(status.success(), "durable: {out:?}\n{err}");
        out
    };
    let messages = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.starts_with("seq="))
            .cloned()
            .collect()
    };
    let first = messages(&run(10, 10, &mut send));
    let from: u64 = first[0]["seq=".len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let want: Vec<String> = (from..10).map(|i| format!("seq={i}: m{i}")).collect();
    assert_eq!(first, want);
    send(10);
    recorded(20);
    let out = run(15, 5, &mut send);
    let again = messages(&out);
    let want: Vec<String> = (10..25).map(|i| format!("seq={i}: m{i}")).collect();
    assert_eq!(again, want, "{out:?}");
    assert!(!out.iter().any(|l| l.starts_with("GAP")), "{out:?}");
    stop.store(true, Ordering::Relaxed);
    recorder.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

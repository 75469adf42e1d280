//! report.html opened in headless Chromium: every chart is laid out with a non-zero size and
//! the page loads nothing from the network. Needs `chromium` on PATH (Debian package
//! `chromium`): without it the test says so and skips, except under `.ci/run`
//! (`PEREGRINE_REQUIRE_TOOLS=1`), which installs it and where a missing Chromium fails.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs Chromium with `--dump-dom` on `page`; returns the serialised DOM after the load event.
fn dump_dom(chromium: &Path, page: &Path, profile: &Path) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll chromium") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = out.join().expect("stdout reader").expect("read stdout");
    let log = err.join().expect("stderr reader").unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}):\n{log}");
    assert!(!dom.is_empty(), "chromium printed no DOM:\n{log}");
    dom
}

/// The value of `name="..."` in the first `<body ...>` tag.
fn body_attribute(dom: &str, name: &str) -> Option<String> {
    let start = dom.find("<body")?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let key = format!("{name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(tag[at..at + tag[at..].find('"')?].to_string())
}

#[test]
fn chromium_lays_out_every_chart_and_fetches_nothing() {
    let Some(chromium) = peregrine_testkit::program("chromium", "apt-get install chromium") else {
        return;
    };
    let dir = common::sample_copy("browser");
    let rendered = peregrine_report::render(&dir).expect("render the sample");
    let dom = dump_dom(
        &chromium,
        &rendered.html_path,
        &dir.join("chromium-profile"),
    );

    let expected = body_attribute(&dom, "data-charts-expected").expect("data-charts-expected");
    let shown = body_attribute(&dom, "data-charts-rendered")
        .unwrap_or_else(|| panic!("the page script did not run: no data-charts-rendered"));
    assert!(!rendered.charts.is_empty());
    assert_eq!(expected, rendered.charts.len().to_string());
    assert_eq!(shown, expected, "charts laid out with a non-zero size");
    assert!(!dom.contains("http://") && !dom.contains("https://"));
    std::fs::remove_dir_all(dir).ok();
}

//! Loading a results folder: the sample loads; a missing, malformed or foreign-version
//! results.json is refused with a message naming the file and what to do.

mod common;

use common::{fresh_dir, sample};
use peregrine_report::model::{Scenario, FORMAT_V1, FORMAT_VERSION};
use peregrine_report::{load, ReportError};

#[test]
fn sample_folder_loads_with_every_scenario_the_report_shows() {
    let r = sample();
    // The sample is a format 1 folder (a free detail map): still read, its details typed.
    assert_eq!(r.format, FORMAT_V1);
    let loads: Vec<_> = r
        .cells
        .iter()
        .filter(|c| c.scenario == Some(Scenario::Load))
        .map(|c| c.detail.paced().expect("a load cell's detail is paced"))
        .collect();
    assert!(loads.iter().all(|d| d.settings.contains_key("ping_every")));
    assert!(loads.iter().any(|d| d.path.as_deref() == Some("loopback")));
    assert!(r
        .cells
        .iter()
        .filter(|c| c.scenario == Some(Scenario::Pingpong))
        .any(|c| c.detail.latency().is_some_and(|d| d.path.is_some())));
    assert!(!r.machine.cpu_model.is_empty());
    for scenario in [
        Scenario::Floor,
        Scenario::Raw,
        Scenario::Pingpong,
        Scenario::Load,
        Scenario::Max,
        Scenario::Embedded,
        Scenario::Throughput,
    ] {
        assert!(
            r.cells.iter().any(|c| c.scenario == Some(scenario)),
            "the sample has no {scenario:?} cell"
        );
    }
    assert!(
        r.cells
            .iter()
            .any(|c| c.scenario == Some(Scenario::Load) && c.sustained == Some(false)),
        "the sample needs a load cell that was not sustained"
    );
}

#[test]
fn missing_results_file_is_not_found_and_names_the_file() {
    let dir = fresh_dir("missing");
    let err = load(&dir).expect_err("an empty folder has no results");
    let expected_path = dir.join("results.json");
    assert!(
        matches!(&err, ReportError::NotFound { path } if *path == expected_path),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&expected_path.display().to_string()), "{msg}");
    assert!(
        msg.contains("peregrine bench"),
        "the message says what to do: {msg}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn missing_folder_is_not_found_too() {
    let parent = fresh_dir("gone");
    let dir = parent.join("does-not-exist");
    assert!(matches!(load(&dir), Err(ReportError::NotFound { .. })));
    std::fs::remove_dir_all(parent).ok();
}

#[test]
fn malformed_json_is_refused_with_file_and_position() {
    let dir = fresh_dir("malformed");
    let path = dir.join("results.json");
    std::fs::write(&path, "{\"format\": 1, \"cells\": [\n  {\"id\": }\n]}").unwrap();
    let err = load(&dir).expect_err("not JSON");
    assert!(
        matches!(&err, ReportError::Malformed { path: p, .. } if *p == path),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("line 2"),
        "the parser's position is kept: {msg}"
    );
    assert!(msg.contains("re-run the benchmark"), "{msg}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn valid_json_of_the_wrong_shape_is_malformed() {
    let dir = fresh_dir("shape");
    let path = dir.join("results.json");
    std::fs::write(
        &path,
        format!("{{\"format\": {FORMAT_VERSION}, \"cells\": []}}"),
    )
    .unwrap();
    let err = load(&dir).expect_err("fields are missing");
    assert!(matches!(err, ReportError::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()));

    std::fs::write(&path, "[1, 2, 3]").unwrap();
    let err = load(&dir).expect_err("no format field");
    assert!(err.to_string().contains("`format`"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn unknown_format_version_is_refused_before_the_fields_are_read() {
    let dir = fresh_dir("version");
    let path = dir.join("results.json");
    let future = FORMAT_VERSION + 1;
    // A future layout: its fields mean nothing to this reader, the version says so first.
    std::fs::write(
        &path,
        format!("{{\"format\": {future}, \"peregrine_version\": \"9.9.9\", \"rows\": []}}"),
    )
    .unwrap();
    let err = load(&dir).expect_err("a newer format");
    match &err {
        ReportError::UnsupportedFormat {
            path: p,
            found,
            expected,
            written_by,
        } => {
            assert_eq!(*p, path);
            assert_eq!(*found, u64::from(future));
            assert_eq!(*expected, FORMAT_VERSION);
            assert_eq!(written_by.as_deref(), Some("9.9.9"));
        }
        other => panic!("expected UnsupportedFormat, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("version {future}")), "{msg}");
    assert!(
        msg.contains("peregrine 9.9.9"),
        "names the version to use: {msg}"
    );
    std::fs::remove_dir_all(dir).ok();
}

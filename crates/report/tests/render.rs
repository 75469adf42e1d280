//! Rendering a results folder: report.txt, one SVG and one PNG per chart the data allows, and a
//! self-contained report.html. Everything is written under a fresh temp dir.

mod common;

use common::{cells, sample, sample_copy, transports};
use peregrine_report::model::Scenario;
use peregrine_report::{html, render, Rendered};
use std::collections::BTreeSet;
use std::path::Path;

fn render_sample(name: &str) -> (std::path::PathBuf, Rendered) {
    let dir = sample_copy(name);
    let rendered = render(&dir).expect("the sample renders");
    (dir, rendered)
}

/// The trimmed contents of every `<text>` element of an SVG document, which must parse.
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).expect("read the svg");
    let doc = roxmltree::Document::parse(&svg)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.tag_name().name() == "text")
        .map(|n| n.text().unwrap_or_default().trim().to_string())
        .collect()
}

#[test]
fn render_writes_text_charts_and_html_into_the_folder() {
    let (dir, r) = render_sample("files");
    assert_eq!(r.text_path, dir.join("report.txt"));
    assert_eq!(r.html_path, dir.join("report.html"));
    assert_eq!(std::fs::read_to_string(&r.text_path).unwrap(), r.text);
    assert_eq!(r.text, peregrine_report::text(&sample()));
    for file in r.files() {
        let len = std::fs::metadata(file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .len();
        assert!(len > 0, "{} is empty", file.display());
    }
    for chart in &r.charts {
        assert_eq!(
            chart.svg_path,
            dir.join("charts").join(format!("{}.svg", chart.name))
        );
        assert_eq!(
            chart.png_path,
            dir.join("charts").join(format!("{}.png", chart.name))
        );
        assert_eq!(std::fs::read_to_string(&chart.svg_path).unwrap(), chart.svg);
    }
    // The checked-in folder is only read.
    assert!(!common::sample_dir().join("report.txt").exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_sample_gets_every_chart_its_data_allows() {
    let (dir, r) = render_sample("names");
    let results = sample();
    let load = cells(&results, Scenario::Load);
    let mut expected: BTreeSet<String> = ["latency_vs_size", "latency_vs_rate", "boxplot"]
        .map(String::from)
        .into();
    for t in transports(&load) {
        expected.insert(format!("stddev_{t}"));
    }
    if !cells(&results, Scenario::Embedded).is_empty() {
        expected.insert("embedded".to_string());
    }
    let names: BTreeSet<String> = r.charts.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, expected);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn charts_without_data_are_not_drawn() {
    let dir = common::fresh_dir("absent");
    let mut results = sample();
    results
        .cells
        .retain(|c| matches!(c.scenario, Some(Scenario::Pingpong | Scenario::Max)));
    let charts = peregrine_report::charts(&results, &dir.join("charts")).unwrap();
    let names: Vec<&str> = charts.iter().map(|c| c.name.as_str()).collect();
    // No load cells: latency vs size falls back to ping-pong; nothing else but the box plot.
    assert_eq!(names, ["latency_vs_size", "boxplot"]);
    let texts = svg_texts(&charts[0].svg_path);
    assert!(texts.iter().any(|t| t.contains("ping-pong")), "{texts:?}");
    let files: BTreeSet<String> = std::fs::read_dir(dir.join("charts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = [
        "latency_vs_size.svg",
        "latency_vs_size.png",
        "boxplot.svg",
        "boxplot.png",
    ]
    .map(String::from)
    .into();
    assert_eq!(files, expected);

    results.cells.clear();
    let none = peregrine_report::charts(&results, &dir.join("none")).unwrap();
    assert!(none.is_empty());
    assert!(!dir.join("none").exists(), "no charts, no folder");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn every_svg_parses_and_names_its_series() {
    let (dir, r) = render_sample("svg");
    let results = sample();
    let load = cells(&results, Scenario::Load);
    let load_transports = transports(&load);
    for chart in &r.charts {
        let texts = svg_texts(&chart.svg_path);
        assert!(
            texts.contains(&chart.title),
            "{}: the title is drawn: {texts:?}",
            chart.name
        );
        match chart.name.as_str() {
            "latency_vs_size" | "latency_vs_rate" => {
                for t in &load_transports {
                    for series in [format!("{t} Avg"), format!("{t} 99.9th")] {
                        assert!(
                            texts.contains(&series),
                            "{}: no legend {series:?} in {texts:?}",
                            chart.name
                        );
                    }
                }
            }
            name if name.starts_with("stddev_") => {
                let t = &name["stddev_".len()..];
                let ours: Vec<_> = load.iter().filter(|c| c.transport == t).collect();
                for c in &ours {
                    let size = format!("{}B", c.size_bytes);
                    assert!(texts.contains(&size), "{name}: no group {size}");
                    let rate = format!(
                        "{} msgs/sec",
                        common::rate_label(c.rate_requested_msgs_per_s.unwrap())
                    );
                    assert!(texts.contains(&rate), "{name}: no legend {rate}");
                }
            }
            "boxplot" => {
                for c in cells(&results, Scenario::Pingpong) {
                    let label = format!("{} {}B", c.transport, c.size_bytes);
                    assert!(texts.contains(&label), "no box {label} in {texts:?}");
                }
                let floor = cells(&results, Scenario::Floor)[0];
                assert!(texts.contains(&format!("floor {}B", floor.size_bytes)));
                assert!(texts.iter().any(|t| t.ends_with("@100K")), "{texts:?}");
            }
            "embedded" => {
                assert!(texts.contains(&"Mean latency".to_string()));
                assert!(texts.contains(&"Latency standard deviation".to_string()));
                let c = cells(&results, Scenario::Embedded)[0];
                assert!(texts.contains(&format!("{} {}B", c.transport, c.size_bytes)));
                for tick in ["1K", "10K", "100K"] {
                    assert!(texts.contains(&tick.to_string()), "no tick {tick}");
                }
            }
            other => panic!("unexpected chart {other}"),
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn every_png_decodes_to_a_picture() {
    let (dir, r) = render_sample("png");
    for chart in &r.charts {
        let file = std::fs::File::open(&chart.png_path).unwrap();
        let mut reader = png::Decoder::new(file)
            .read_info()
            .unwrap_or_else(|e| panic!("{}: {e}", chart.png_path.display()));
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert!(
            (600..=2000).contains(&info.width) && (300..=2000).contains(&info.height),
            "{}: {}x{}",
            chart.name,
            info.width,
            info.height
        );
        let channels = info.color_type.samples();
        let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
        let distinct: BTreeSet<&[u8]> = pixels.iter().copied().collect();
        assert!(
            distinct.len() > 10,
            "{}: only {} colours",
            chart.name,
            distinct.len()
        );
        let background = pixels[0];
        let drawn = pixels.iter().filter(|p| **p != background).count();
        assert!(
            drawn * 100 > pixels.len(),
            "{}: less than 1% of the picture is drawn",
            chart.name
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn html_is_self_contained_with_every_chart_inlined() {
    let (dir, r) = render_sample("html");
    let page = std::fs::read_to_string(&r.html_path).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(&format!("data-charts-expected=\"{}\"", r.charts.len())));
    assert_eq!(page.matches("class=\"chart\"").count(), r.charts.len());
    assert_eq!(page.matches("<svg ").count(), r.charts.len());
    for chart in &r.charts {
        assert!(page.contains(&format!("data-name=\"{}\"", chart.name)));
    }
    for external in ["http://", "https://", "<link", " src=", "@import", "url("] {
        assert!(!page.contains(external), "the page refers to {external}");
    }
    for title in [
        "Ping-pong latency (half round trip), microseconds",
        "Full Results",
        "Maximum sustainable throughput",
        "One-way latency from embedded timestamps",
        "Throughput",
    ] {
        assert!(page.contains(&format!("<h2>{title}</h2>")), "no {title}");
    }
    let results = sample();
    assert!(page.contains(&results.machine.cpu_model));
    assert!(page.contains(&results.command_line.join(" ")));
    assert!(page.contains("<th>Message Size/Rate</th>"));
    assert!(page.contains("CPU-bound after 100K msgs/sec</td>"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn html_escapes_text_from_the_data() {
    let mut results = sample();
    results.machine.hostname = "<script>alert('host')</script>".to_string();
    results.command_line.push("a&b<c>".to_string());
    for c in &mut results.cells {
        if c.scenario == Some(Scenario::Throughput) {
            c.transport = "<b>x</b>".to_string();
        }
    }
    let page = html(&results, &[]);
    assert!(!page.contains("<script>alert"));
    assert!(page.contains("&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"));
    assert!(page.contains("a&amp;b&lt;c&gt;"));
    assert!(!page.contains("<b>x</b>"));
    assert!(page.contains("&lt;b&gt;x&lt;/b&gt;"));
    assert!(page.contains("data-charts-expected=\"0\""));
}

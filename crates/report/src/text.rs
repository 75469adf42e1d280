//! The report as aligned plain text (`report.txt`).

use crate::model::Results;
use crate::tables::{self, Row, Table};

/// The report's title, first line of `report.txt` and title of `report.html`.
pub(crate) const TITLE: &str = "Peregrine benchmark report";

/// The text report: the machine block, then one section per kind of measurement that has cells
/// (ping-pong, echo, Full Results of the load sweep, maximum throughput, embedded-timestamp
/// latency, throughput). Latencies are in microseconds with two decimals.
pub fn text(results: &Results) -> String {
    let mut out = String::new();
    underline(&mut out, TITLE, '=');
    let machine = tables::machine(results);
    let width = machine.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in &machine {
        out.push_str(&format!("{key:<width$}  {value}\n"));
    }
    for section in tables::sections(results) {
        out.push('\n');
        underline(&mut out, &section.title, '-');
        if let Some(intro) = &section.intro {
            out.push_str(intro);
            out.push('\n');
        }
        for table in &section.tables {
            out.push('\n');
            write_table(&mut out, table);
        }
    }
    out
}

fn underline(out: &mut String, title: &str, ch: char) {
    out.push_str(title);
    out.push('\n');
    out.extend(std::iter::repeat_n(ch, title.chars().count()));
    out.push('\n');
}

/// Writes one table, columns aligned across all its rows (repeated headers included): labels
/// left-aligned, numbers right-aligned, two spaces between columns.
fn write_table(out: &mut String, table: &Table) {
    if let Some(caption) = &table.caption {
        out.push_str(caption);
        out.push('\n');
    }
    let mut widths: Vec<usize> = Vec::new();
    for row in &table.rows {
        if let Row::Header(cols) | Row::Cells(cols) = row {
            for (i, col) in cols.iter().enumerate() {
                let len = col.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(len),
                    None => widths.push(len),
                }
            }
        }
    }
    for row in &table.rows {
        let line = match row {
            Row::Header(cols) | Row::Cells(cols) => cols
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (col, &w))| {
                    if i < table.left {
                        format!("{col:<w$}")
                    } else {
                        format!("{col:>w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  "),
            // Under the number columns, as in seed 001.
            Row::Note(note) => {
                let indent = widths.first().map_or(0, |w| w + 2);
                format!("{:indent$}{note}", "")
            }
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

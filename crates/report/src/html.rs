//! The report as one self-contained HTML page (`report.html`): inline CSS, inline SVG charts,
//! the text report's tables as HTML tables, and nothing fetched from anywhere.

use crate::charts::Chart;
use crate::model::Results;
use crate::tables::{self, Row, Table};
use crate::text::TITLE;

const STYLE: &str = "
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1280px;
       padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.9em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { padding: 0.15em 0.7em; white-space: nowrap; }
th { background: #f0f0f0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.note td { font-style: italic; color: #8a3b00; }
table.machine th { text-align: left; background: none; font-weight: normal; color: #555; }
pre.command { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
figure.chart { margin: 1.5em 0; }
figure.chart svg { max-width: 100%; height: auto; display: block; }
";

/// Counts the charts the browser actually laid out (an inline `<svg>` with a non-zero size)
/// into `body[data-charts-rendered]`, to compare with `data-charts-expected`.
const SCRIPT: &str = "
window.addEventListener('load', function () {
  var rendered = 0;
  document.querySelectorAll('.chart').forEach(function (chart) {
    var svg = chart.querySelector('svg');
    if (!svg) { return; }
    var box = svg.getBoundingClientRect();
    if (box.width > 0 && box.height > 0) { rendered += 1; }
  });
  document.body.dataset.chartsRendered = String(rendered);
});
";

/// The HTML page: machine block and command line, every chart inlined as SVG (each in a
/// `<figure class="chart" data-name="...">`, titled by the chart itself), then the same
/// sections as [`text`](crate::text()) as HTML tables. Everything taken from the data is
/// HTML-escaped; the page loads nothing. `<body data-charts-expected="N">` holds the number of
/// charts, and a small inline script sets `data-charts-rendered` to the number the browser laid
/// out with a non-zero size.
pub fn html(results: &Results, charts: &[Chart]) -> String {
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{}</title>\n", escape(TITLE)));
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!("<style>{STYLE}</style>\n</head>\n"));
    out.push_str(&format!(
        "<body data-charts-expected=\"{}\">\n<h1>{}</h1>\n",
        charts.len(),
        escape(TITLE)
    ));

    out.push_str("<section class=\"machine\">\n<table class=\"machine\">\n");
    for (key, value) in tables::machine(results) {
        if key == "command" {
            continue;
        }
        out.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>\n",
            escape(key),
            escape(&value)
        ));
    }
    out.push_str("</table>\n");
    let command = tables::machine(results)
        .into_iter()
        .find(|(k, _)| *k == "command")
        .map(|(_, v)| v)
        .unwrap_or_default();
    out.push_str(&format!(
        "<pre class=\"command\"><code>{}</code></pre>\n</section>\n",
        escape(&command)
    ));

    if !charts.is_empty() {
        out.push_str("<section class=\"charts\">\n<h2>Charts</h2>\n");
        for chart in charts {
            out.push_str(&format!(
                "<figure class=\"chart\" data-name=\"{}\" aria-label=\"{}\">\n{}\n</figure>\n",
                escape(&chart.name),
                escape(&chart.title),
                inline_svg(&chart.svg)
            ));
        }
        out.push_str("</section>\n");
    }

    for section in tables::sections(results) {
        out.push_str(&format!("<section>\n<h2>{}</h2>\n", escape(&section.title)));
        if let Some(intro) = &section.intro {
            out.push_str(&format!("<p>{}</p>\n", escape(intro)));
        }
        for table in &section.tables {
            write_table(&mut out, table);
        }
        out.push_str("</section>\n");
    }
    out.push_str(&format!("<script>{SCRIPT}</script>\n</body>\n</html>\n"));
    out
}

fn write_table(out: &mut String, table: &Table) {
    out.push_str("<table>\n");
    if let Some(caption) = &table.caption {
        out.push_str(&format!("<caption>{}</caption>\n", escape(caption)));
    }
    let columns = table
        .rows
        .iter()
        .map(|r| match r {
            Row::Header(c) | Row::Cells(c) => c.len(),
            Row::Note(_) => 0,
        })
        .max()
        .unwrap_or(1);
    for row in &table.rows {
        let (tag, cols) = match row {
            Row::Header(cols) => ("th", cols),
            Row::Cells(cols) => ("td", cols),
            Row::Note(note) => {
                out.push_str(&format!(
                    "<tr class=\"note\"><td></td><td colspan=\"{}\">{}</td></tr>\n",
                    columns.saturating_sub(1).max(1),
                    escape(note)
                ));
                continue;
            }
        };
        out.push_str("<tr>");
        for (i, col) in cols.iter().enumerate() {
            let class = if i < table.left { "" } else { " class=\"num\"" };
            out.push_str(&format!("<{tag}{class}>{}</{tag}>", escape(col)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// A plotters SVG document made fit to sit inside HTML: the SVG namespace is implied there, so
/// the `xmlns` declaration (a URL) is dropped, as is any XML declaration.
fn inline_svg(svg: &str) -> String {
    let svg = svg.trim();
    let svg = match svg.find("<svg") {
        Some(start) => &svg[start..],
        None => svg,
    };
    svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
}

/// Escapes text for HTML element content and quoted attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn inline_svg_drops_the_namespace_url() {
        let svg = "<svg width=\"10\" height=\"10\" viewBox=\"0 0 10 10\" \
                   xmlns=\"http://www.w3.org/2000/svg\">\n</svg>\n";
        let inlined = inline_svg(svg);
        assert!(!inlined.contains("http"));
        assert!(inlined.starts_with("<svg width=\"10\""));
    }
}

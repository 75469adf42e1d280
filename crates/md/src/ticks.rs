//! Recorded ticks as text: what `peregrine feed --ticks FILE.csv` replays.
//!
//! One tick a line, comma-separated: the time (UTC in ISO 8601, `2026-11-27T14:30:00.000001Z`,
//! or nanoseconds since the epoch), the service, the item, then `FIELD=value` pairs by
//! dictionary name, each value read as the field's type says
//! ([`Dictionary::parse_value`]). A value holding a comma is quoted
//! (`DSPLY_NAME="APPLE, INC"`; `""` inside quotes is one quote). Blank lines and lines starting
//! with `#` are skipped. Times never go backwards. The first tick of an item is its image (a
//! REFRESH with exactly those fields), every later one an UPDATE of the fields it names.
//!
//! ```text
//! # time, service, item, fields
//! 2026-11-27T14:30:00.000000Z,FEED1,AAA.O,DSPLY_NAME="AAA INC",BID=189.21,ASK=189.22,BIDSIZE=300
//! 2026-11-27T14:30:00.002500Z,FEED1,AAA.O,BID=189.23
//! ```
//!
//! Every error names the line, what is wrong and the fix.

use crate::dictionary::{parse_utc_ns, Dictionary};
use crate::model::{check_item_name, check_service, OwnedValue};
use std::fmt;

/// The sample ticks shipped with Peregrine (`crates/md/ticks/sample.csv`: 300 ticks of 10
/// items over about a minute), for `peregrine feed --ticks sample` from any folder.
pub const SAMPLE: &str = include_str!("../ticks/sample.csv");

/// One recorded tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// UTC, nanoseconds since the epoch.
    pub time_ns: u64,
    pub service: String,
    pub item: String,
    /// (field id, value), in the order of the line.
    pub fields: Vec<(u16, OwnedValue)>,
}

/// A line that is not a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickError {
    /// 1 for the first line.
    pub line: usize,
    pub why: String,
}

impl fmt::Display for TickError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

impl std::error::Error for TickError {}

/// The ticks of a whole file's text.
pub fn parse(dictionary: &Dictionary, text: &str) -> Result<Vec<Tick>, TickError> {
    let mut out: Vec<Tick> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(t) = parse_line(dictionary, i + 1, line)? {
            if let Some(last) = out.last() {
                if t.time_ns < last.time_ns {
                    return Err(TickError {
                        line: i + 1,
                        why: "its time is before the previous tick's: sort the file by time".into(),
                    });
                }
            }
            out.push(t);
        }
    }
    Ok(out)
}

/// One line: a tick, `None` for a blank or comment line, or why not.
pub fn parse_line(
    dictionary: &Dictionary,
    line_no: usize,
    line: &str,
) -> Result<Option<Tick>, TickError> {
    let err = |why: String| TickError { line: line_no, why };
    let line = line.trim_end_matches('\r');
    if line.trim().is_empty() || line.trim_start().starts_with('#') {
        return Ok(None);
    }
    let cols = split(line).map_err(err)?;
    if cols.len() < 4 {
        return Err(err(format!(
            "{} columns: give time,service,item,FIELD=value[,FIELD=value...], for example \
             2026-11-27T14:30:00Z,FEED1,AAA.O,BID=189.21",
            cols.len()
        )));
    }
    let time_ns = parse_utc_ns(cols[0].trim()).ok_or_else(|| {
        err(format!(
            "time {:?} is not accepted: give UTC in ISO 8601 (2026-11-27T14:30:00.000001Z) or \
             nanoseconds since 1970",
            cols[0]
        ))
    })?;
    let service = cols[1].trim();
    check_service(service.as_bytes()).map_err(|e| {
        err(format!(
            "service {service:?}: {e}; give {}",
            crate::model::SERVICE_ALPHABET
        ))
    })?;
    let item = cols[2].trim();
    check_item_name(item.as_bytes()).map_err(|e| {
        err(format!(
            "item {item:?}: {e}; give {}",
            crate::model::ITEM_ALPHABET
        ))
    })?;
    let mut fields = Vec::with_capacity(cols.len() - 3);
    for c in &cols[3..] {
        let Some((name, value)) = c.split_once('=') else {
            return Err(err(format!(
                "{c:?} is not FIELD=value: give a dictionary name, '=' and the value"
            )));
        };
        let (fid, v) = dictionary
            .parse_value(name.trim(), &unquote(value))
            .map_err(err)?;
        if fields.iter().any(|(f, _)| *f == fid) {
            return Err(err(format!("{} twice: give each field once", name.trim())));
        }
        fields.push((fid, v));
    }
    Ok(Some(Tick {
        time_ns,
        service: service.to_string(),
        item: item.to_string(),
        fields,
    }))
}

/// The columns of a line: split at commas outside double quotes (quotes kept for
/// [`unquote`]).
fn split(line: &str) -> Result<Vec<&str>, String> {
    let mut cols = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, b) in line.bytes().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                cols.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return Err("a quote is not closed: close it, or write \"\" for a quote inside".into());
    }
    cols.push(&line[start..]);
    Ok(cols)
}

/// A value without its surrounding quotes, `""` inside them read as one quote.
fn unquote(v: &str) -> String {
    match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Price;

    #[test]
    fn the_sample_ticks_read_as_300_ticks_of_10_items() {
        let ticks = parse(&Dictionary::builtin(), SAMPLE).unwrap();
        assert_eq!(ticks.len(), 300);
        let items: std::collections::BTreeSet<&str> =
            ticks.iter().map(|t| t.item.as_str()).collect();
        assert_eq!(items.len(), 10);
    }

    #[test]
    fn a_tick_file_reads_exact_values_of_every_type() {
        let d = Dictionary::builtin();
        let text = "# a comment\n\
            2026-11-27T14:30:00Z,FEED1,AAA.O,DSPLY_NAME=\"AAA, INC \"\"A\"\"\",BID=189.21,BIDSIZE=300,CURRENCY=USD,QUOTIM=2026-11-27T14:30:00.000000001Z\n\
            \n\
            1795789800000000500,FEED1,AAA.O,BID=-0.0050,CURRENCY=978\n";
        let t = parse(&d, text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].time_ns, 1_795_789_800_000_000_000);
        assert_eq!(
            (t[0].service.as_str(), t[0].item.as_str()),
            ("FEED1", "AAA.O")
        );
        assert_eq!(
            t[0].fields,
            [
                (3, OwnedValue::Str("AAA, INC \"A\"".into())),
                (
                    22,
                    OwnedValue::Price(Price {
                        mantissa: 18921,
                        exponent: -2
                    })
                ),
                (30, OwnedValue::Int(300)),
                (15, OwnedValue::Enum(840)),
                (1025, OwnedValue::TimeNs(1_795_789_800_000_000_001)),
            ]
        );
        assert_eq!(
            t[1].fields,
            [
                (
                    22,
                    OwnedValue::Price(Price {
                        mantissa: -50,
                        exponent: -4
                    })
                ),
                (15, OwnedValue::Enum(978)),
            ]
        );
    }

    #[test]
    fn a_malformed_line_names_its_line_number_and_the_fix() {
        let d = Dictionary::builtin();
        let ok = "2026-11-27T14:30:00Z,FEED1,AAA.O,BID=1\n";
        let cases = [
            ("2026-11-27T14:30:00Z,FEED1,AAA.O\n", "columns"),
            ("yesterday,FEED1,AAA.O,BID=1\n", "time \"yesterday\""),
            (
                "2026-11-27T14:30:00Z,FEED 1,AAA.O,BID=1\n",
                "service \"FEED 1\"",
            ),
            ("2026-11-27T14:30:00Z,FEED1,AAA O,BID=1\n", "item \"AAA O\""),
            ("2026-11-27T14:30:00Z,FEED1,AAA.O,BID\n", "not FIELD=value"),
            (
                "2026-11-27T14:30:00Z,FEED1,AAA.O,NOPE=1\n",
                "NOPE is not a field",
            ),
            (
                "2026-11-27T14:30:00Z,FEED1,AAA.O,BID=abc\n",
                "BID=abc is not accepted",
            ),
            (
                "2026-11-27T14:30:00Z,FEED1,AAA.O,BIDSIZE=1.5\n",
                "whole number",
            ),
            ("2026-11-27T14:30:00Z,FEED1,AAA.O,CURRENCY=XXX\n", "USD"),
            (
                "2026-11-27T14:30:00Z,FEED1,AAA.O,BID=1,BID=2\n",
                "BID twice",
            ),
            (
                "2026-11-27T14:30:00Z,FEED1,AAA.O,DSPLY_NAME=\"x\n",
                "quote is not closed",
            ),
            (
                "2026-11-27T14:29:00Z,FEED1,AAA.O,BID=1\n",
                "before the previous",
            ),
        ];
        for (bad, want) in cases {
            let e = parse(&d, &format!("{ok}{bad}")).unwrap_err();
            assert_eq!(e.line, 2, "{bad}: {e}");
            assert!(e.to_string().contains(want), "{bad}: {e}");
            assert!(e.to_string().starts_with("line 2: "), "{e}");
        }
    }

    #[test]
    fn decimals_are_kept_exactly_and_out_of_range_ones_refused() {
        let p = |t| Price::parse_decimal(t);
        assert_eq!(
            p("189.21").map(|p| (p.mantissa, p.exponent)),
            Some((18921, -2))
        );
        assert_eq!(p("1.50").map(|p| (p.mantissa, p.exponent)), Some((150, -2)));
        assert_eq!(p("5000").map(|p| (p.mantissa, p.exponent)), Some((5000, 0)));
        assert_eq!(p("+.5").map(|p| (p.mantissa, p.exponent)), Some((5, -1)));
        for bad in [
            "",
            "-",
            ".",
            "1e5",
            "1.2.3",
            "0.0000000000001",
            "99999999999999999999",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(p("189.21").unwrap().to_string(), "189.21");
    }
}

//! Topic patterns: exact names, globs and regular expressions, as subscriptions and QUERY
//! frames carry them.

use peregrine_wire::query::{check_pattern, PatternKind};
use std::fmt;

/// A topic pattern: an exact name, a glob (`*` any run of characters, `?` one character) or a
/// regular expression that must match the whole name.
#[derive(Debug, Clone)]
pub struct Pattern {
    kind: PatternKind,
    text: String,
    regex: Option<regex::Regex>,
}

/// Why a pattern was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pub pattern: String,
    pub problem: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid topic pattern '{}': {}",
            self.pattern, self.problem
        )
    }
}
impl std::error::Error for PatternError {}

impl Pattern {
    /// Compiles a pattern; the text follows the rules of a topic name (1 to 1024 bytes of
    /// UTF-8 without NUL). A regular expression is limited to 1 MiB compiled.
    pub fn new(kind: PatternKind, text: &str) -> Result<Pattern, PatternError> {
        let err = |problem: String| PatternError {
            pattern: text.chars().take(80).collect(),
            problem,
        };
        check_pattern(text).map_err(|e| err(e.to_string()))?;
        let regex = match kind {
            PatternKind::Regex => Some(
                regex::RegexBuilder::new(&format!("^(?:{text})$"))
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| err(format!("not a regular expression: {e}")))?,
            ),
            _ => None,
        };
        Ok(Pattern {
            kind,
            text: text.to_string(),
            regex,
        })
    }

    /// An exact name, or a glob when `text` holds `*` or `?`.
    pub fn exact_or_glob(text: &str) -> Result<Pattern, PatternError> {
        let kind = if text.contains(['*', '?']) {
            PatternKind::Glob
        } else {
            PatternKind::Exact
        };
        Pattern::new(kind, text)
    }

    pub fn kind(&self) -> PatternKind {
        self.kind
    }
    pub fn text(&self) -> &str {
        &self.text
    }
    /// True for globs and regular expressions.
    pub fn is_wildcard(&self) -> bool {
        self.kind != PatternKind::Exact
    }

    pub fn matches(&self, topic: &str) -> bool {
        match (&self.kind, &self.regex) {
            (PatternKind::Exact, _) => self.text == topic,
            (PatternKind::Glob, _) => glob_match(&self.text, topic),
            (PatternKind::Regex, Some(r)) => r.is_match(topic),
            (PatternKind::Regex, None) => false,
        }
    }
}

/// Shell-style glob over characters, without path semantics (`*` crosses dots): topic names
/// are not paths, which is why this is not `globset`. Linear backtracking on the last `*`.
fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

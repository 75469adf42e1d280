//! Loading the crate's TOML files (the field dictionary, the users file): one error type that
//! names the key, the value and what is accepted, and the helpers that walk a TOML table.

use core::fmt;
use std::path::Path;
use toml::{Table, Value};

/// Why a dictionary or users file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The file could not be read.
    Read { path: String, error: String },
    /// The file is not TOML.
    Syntax { file: String, error: String },
    /// A key holds a value that is not accepted (or a key is unknown, or missing).
    Invalid {
        file: String,
        /// The dotted key, e.g. `fields.BID.fid`.
        key: String,
        /// The value as written (`(missing)` for a required key that is absent).
        value: String,
        /// What the key accepts.
        accepted: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read { path, error } => write!(f, "cannot read {path}: {error}"),
            LoadError::Syntax { file, error } => write!(f, "{file} is not valid TOML: {error}"),
            LoadError::Invalid {
                file,
                key,
                value,
                accepted,
            } => write!(f, "{file}: {key} = {value} is not accepted: {accepted}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads a file to a string, naming the path on failure.
pub(crate) fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|e| LoadError::Read {
        path: path.display().to_string(),
        error: e.to_string(),
    })
}

/// Walks one TOML document, building errors that name the file.
pub(crate) struct Doc<'f> {
    pub file: &'f str,
}

impl Doc<'_> {
    pub fn parse(&self, text: &str) -> Result<Table, LoadError> {
        text.parse::<Table>().map_err(|e| LoadError::Syntax {
            file: self.file.to_string(),
            error: e.to_string(),
        })
    }

    pub fn invalid(
        &self,
        key: &str,
        value: impl fmt::Display,
        accepted: impl Into<String>,
    ) -> LoadError {
        LoadError::Invalid {
            file: self.file.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            accepted: accepted.into(),
        }
    }

    /// Refuses any key of `table` not in `known`.
    pub fn only_keys(&self, prefix: &str, table: &Table, known: &[&str]) -> Result<(), LoadError> {
        match table.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(self.invalid(
                &join(prefix, k),
                "...",
                format!("an unknown key: known keys are {}", known.join(", ")),
            )),
            None => Ok(()),
        }
    }

    /// `table[key]` as a table.
    pub fn table<'t>(&self, key: &str, value: &'t Value) -> Result<&'t Table, LoadError> {
        value
            .as_table()
            .ok_or_else(|| self.invalid(key, value, "a table"))
    }

    /// A required key.
    pub fn required<'t>(
        &self,
        prefix: &str,
        table: &'t Table,
        key: &str,
        accepted: &str,
    ) -> Result<&'t Value, LoadError> {
        table
            .get(key)
            .ok_or_else(|| self.invalid(&join(prefix, key), "(missing)", accepted))
    }

    pub fn string<'t>(
        &self,
        key: &str,
        value: &'t Value,
        accepted: &str,
    ) -> Result<&'t str, LoadError> {
        value
            .as_str()
            .ok_or_else(|| self.invalid(key, value, accepted))
    }

    /// A list of strings.
    pub fn strings<'t>(
        &self,
        key: &str,
        value: &'t Value,
        accepted: &str,
    ) -> Result<Vec<&'t str>, LoadError> {
        let list = value
            .as_array()
            .ok_or_else(|| self.invalid(key, value, accepted))?;
        list.iter()
            .enumerate()
            .map(|(i, v)| self.string(&format!("{key}[{i}]"), v, accepted))
            .collect()
    }
}

/// `prefix.key`, quoting a key TOML would need quoted.
pub(crate) fn join(prefix: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

//! A configuration's problems, each located by file, line, column and
//! field, as `check`, `serve` and a reload report them.

use std::fmt;
use std::path::PathBuf;

use super::field_path;
use super::quoted::{escaped, shown_path};

/// One problem in a configuration file, located for the operator. Shown on
/// one line, its control characters escaped (a table key written with
/// `\n` or `\u001b` in it, as serde's messages repeat it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based line of the offending value, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `routes[1].retention` or `upstreams.api.url`;
    /// whole here, shown shortened ([`field_path`]).
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", shown_path(&self.file))?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if self.field.is_empty() {
            write!(f, ": {}", escaped(&self.message))
        } else {
            write!(
                f,
                ": {}: {}",
                field_path(&self.field),
                escaped(&self.message)
            )
        }
    }
}

/// Every problem found in one file; never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn single(error: ConfigError) -> Self {
        Self(vec![error])
    }

    /// Every problem on one line, separated by `; `: how `serve` reports a
    /// configuration it cannot start with (docs/operating.md: one line on stderr).
    /// `check` and reload answers keep one problem per line.
    pub fn one_line(&self) -> String {
        let mut line = String::new();
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                line.push_str("; ");
            }
            line.push_str(&error.to_string().replace('\n', " "));
        }
        line
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

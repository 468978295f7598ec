//! Collects located errors and warnings while the file model is resolved, so one
//! run of `check` reports every problem at once.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::config::{ConfigError, Places};

pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Whether the data plane's secrets (webhook signing secrets, the region
/// token, the keys that seal stored answers) are read from the environment.
/// The one-shot store commands use none of them, and run where they are not
/// given (a migration job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    Read,
    Skip,
}

pub struct Ctx<'a> {
    source: &'a Path,
    text: &'a str,
    pub env: Env<'a>,
    pub secrets: Secrets,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<String>,
    /// Where the settings naming files and URLs are written.
    pub places: Places,
}

impl<'a> Ctx<'a> {
    pub fn new(source: &'a Path, text: &'a str, env: Env<'a>, secrets: Secrets) -> Self {
        Self {
            source,
            text,
            env,
            secrets,
            errors: Vec::new(),
            warnings: Vec::new(),
            places: Places::default(),
        }
    }

    pub fn located(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = match span {
            Some(span) => {
                let (line, column) = line_column(self.text, span.start);
                (Some(line), Some(column))
            }
            None => (None, None),
        };
        ConfigError {
            file: self.source.to_path_buf(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn error(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let error = self.located(span, field, message);
        self.errors.push(error);
    }

    /// A warning reads like an error (`FILE:LINE:COL: FIELD: message`).
    pub fn warn(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let warning = self.located(span, field, message).to_string();
        self.warnings.push(warning);
    }

    /// Keeps where `field` is written (as `written`, at `span`), for a
    /// problem with what it names found after validation.
    pub fn place(&mut self, field: &str, written: &str, span: Range<usize>) {
        let at = line_column(self.text, span.start);
        self.places.insert(field, written, at);
    }

    /// A setting that names a file (`names::file_path`); its place is kept.
    pub fn file_path(&mut self, input: Option<&Spanned<String>>, field: &str) -> Option<PathBuf> {
        if let Some(input) = input {
            self.place(field, field, input.span());
        }
        self.value(input, field, None, |p| super::names::file_path(p).map(Some))
    }

    /// Resolves an optional value: `default` when absent; when `parse` refuses it,
    /// the error is recorded and `default` stands in so checking can go on.
    pub fn value<I, T>(
        &mut self,
        input: Option<&Spanned<I>>,
        field: &str,
        default: T,
        parse: impl FnOnce(&I) -> Result<T, String>,
    ) -> T {
        let Some(input) = input else {
            return default;
        };
        match parse(input.get_ref()) {
            Ok(value) => value,
            Err(message) => {
                self.error(Some(input.span()), field, message);
                default
            }
        }
    }
}

/// Why a secret's variable gave no value. A value that is not UTF-8 reads
/// as absent through [`Env`]; "not set" would send its reader looking for a
/// variable that is there, so it is read again only to tell which case it is.
pub fn no_value(name: &str) -> String {
    match not_unicode(name) {
        true => format!("environment variable {name} is not valid UTF-8"),
        false => format!("environment variable {name} is not set or empty"),
    }
}

/// Whether the variable is set to a value that is not UTF-8 ([`no_value`]).
pub fn not_unicode(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|value| value.to_str().is_none())
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

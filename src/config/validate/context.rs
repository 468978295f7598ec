//! Collects located errors and warnings while the file model is resolved, so one
//! run of `check` reports every problem at once.

use std::cell::OnceCell;
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
    /// Where each line starts, made at the first problem located: a large
    /// file with a warning on every route would be scanned from its top once
    /// per warning otherwise.
    lines: OnceCell<Lines>,
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
            lines: OnceCell::new(),
        }
    }

    /// The 1-based line of a byte offset, to name a second place in a message.
    pub fn line(&self, offset: usize) -> usize {
        self.line_column(offset).0
    }

    fn line_column(&self, offset: usize) -> (usize, usize) {
        (self.lines.get_or_init(|| Lines::new(self.text))).line_column(self.text, offset)
    }

    pub fn located(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = match span {
            Some(span) => {
                let (line, column) = self.line_column(span.start);
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
        let at = self.line_column(span.start);
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

/// The byte offset where each line of a text starts.
struct Lines(Vec<usize>);

impl Lines {
    fn new(text: &str) -> Self {
        let after_newlines =
            (text.bytes().enumerate()).filter_map(|(i, b)| (b == b'\n').then_some(i + 1));
        Self(std::iter::once(0).chain(after_newlines).collect())
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn line_column(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        // The lines starting at or before `offset`; the first starts at 0.
        let line = self.0.partition_point(|&start| start <= offset);
        let line_start = self.0[line - 1];
        let column = text
            .get(line_start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        (line, column)
    }
}

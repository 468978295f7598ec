//! How a value written in the file is quoted back in a message about it.
//! Messages go to terminals, logs and reload answers: a value of a MiB is
//! shown by its start and its length, the line and column telling where
//! the rest is. Secrets are never passed here (they are never quoted).

use std::fmt;
use std::path::Path;

/// The characters of a long value that are shown.
const SHOWN_CHARS: usize = 64;

/// `text` as a Rust string literal (`"..."`, escapes included) when short;
/// past [`SHOWN_CHARS`] characters, its first ones, `…` and its length in
/// bytes: `"/v1/aaaa…"… (1048576 bytes)`.
pub fn quoted(text: &str) -> Quoted<'_> {
    Quoted(text)
}

pub struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        match text.char_indices().nth(SHOWN_CHARS) {
            None => write!(f, "{text:?}"),
            Some((end, _)) => write!(f, "{:?}… ({} bytes)", &text[..end], text.len()),
        }
    }
}

/// `text` for a message that puts it between quotes of its own (clap's
/// `'…'`): as it is, its control characters escaped ([`escaped`]); past
/// [`SHOWN_CHARS`] characters, its first ones, `…` and its length in bytes:
/// `ssss… (100000 bytes)`.
pub fn shortened(text: &str) -> Shortened<'_> {
    Shortened(text)
}

/// Whether [`quoted`] and [`shortened`] say `text` by its start and length.
pub fn is_long(text: &str) -> bool {
    text.chars().nth(SHOWN_CHARS).is_some()
}

pub struct Shortened<'a>(&'a str);

impl fmt::Display for Shortened<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        match text.char_indices().nth(SHOWN_CHARS) {
            None => write!(f, "{}", escaped(text)),
            Some((end, _)) => write!(f, "{}… ({} bytes)", escaped(&text[..end]), text.len()),
        }
    }
}

/// A path up to this length is named whole: a deep but real one is read
/// in full. Past it (a paste gone wrong, a path the system refuses) it is
/// named by its start and its length.
const PATH_SHOWN_BYTES: usize = 256;

/// `path` as a message names it: whole, its control characters escaped,
/// up to [`PATH_SHOWN_BYTES`]; past it, as [`quoted`] quotes a long value.
pub fn shown_path(path: &Path) -> ShownPath<'_> {
    ShownPath(path)
}

pub struct ShownPath<'a>(&'a Path);

impl fmt::Display for ShownPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string_lossy();
        if text.len() <= PATH_SHOWN_BYTES {
            write!(f, "{}", escaped(&text))
        } else {
            write!(f, "{}", quoted(&text))
        }
    }
}

/// `text` as it is, but for its control characters, written as a Rust
/// string literal writes them (`\n`, `\u{1b}`): a message holding a name
/// or a key from the file stays one line, and never moves a terminal's
/// cursor or colours it.
pub fn escaped(text: &str) -> Escaped<'_> {
    Escaped(text)
}

pub struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(char::is_control) {
            f.write_str(&rest[..at])?;
            let control = rest[at..].chars().next().unwrap_or_default();
            write!(f, "{}", control.escape_debug())?;
            rest = &rest[at + control.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::{escaped, quoted, shortened, shown_path};
    use std::path::Path;

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        assert_eq!(escaped("api").to_string(), "api");
        assert_eq!(escaped("a\"b\\é").to_string(), "a\"b\\é");
        assert_eq!(
            escaped("a\u{1b}[31mb\nX\u{7}\u{85}").to_string(),
            "a\\u{1b}[31mb\\nX\\u{7}\\u{85}"
        );
    }

    #[test]
    fn a_short_value_is_quoted_whole() {
        assert_eq!(quoted("queue").to_string(), "\"queue\"");
        assert_eq!(quoted("a\"b\n").to_string(), "\"a\\\"b\\n\"");
        let longest = "x".repeat(64);
        assert_eq!(quoted(&longest).to_string(), format!("\"{longest}\""));
    }

    #[test]
    fn a_long_value_is_quoted_by_its_start_and_length() {
        let text = format!("{}y", "x".repeat(64));
        assert_eq!(
            quoted(&text).to_string(),
            format!("\"{}\"… (65 bytes)", "x".repeat(64))
        );
        // Cut between characters, counted in bytes.
        let text = "é".repeat(100);
        assert_eq!(
            quoted(&text).to_string(),
            format!("\"{}\"… (200 bytes)", "é".repeat(64))
        );
    }

    #[test]
    fn a_value_between_quotes_of_its_own_is_shortened_and_escaped() {
        assert_eq!(shortened("done").to_string(), "done");
        assert_eq!(shortened("a\u{1b}b\n").to_string(), "a\\u{1b}b\\n");
        let text = format!("{}y", "s".repeat(64));
        assert_eq!(
            shortened(&text).to_string(),
            format!("{}… (65 bytes)", "s".repeat(64))
        );
    }

    #[test]
    fn a_path_is_named_whole_unless_far_longer_than_a_real_one() {
        let deep = format!("/{}d", "d/".repeat(127));
        assert_eq!(shown_path(Path::new(&deep)).to_string(), deep);
        assert_eq!(
            shown_path(Path::new("/tmp/a\nb.toml")).to_string(),
            "/tmp/a\\nb.toml"
        );
        let long = format!("{deep}/");
        assert_eq!(
            shown_path(Path::new(&long)).to_string(),
            format!("{:?}… (257 bytes)", &long[..64])
        );
    }
}

//! How a value written in the file is quoted back in a message about it.
//! Messages go to terminals, logs and reload answers: a value of a MiB is
//! shown by its start and its length, the line and column telling where
//! the rest is. Secrets are never passed here (they are never quoted).

use std::fmt;

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
    use super::{escaped, quoted};

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
}

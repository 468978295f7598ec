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

#[cfg(test)]
mod tests {
    use super::quoted;

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

//! RFC 6901 JSON pointers as written in the config.

/// Why a text is not a JSON pointer; it holds the text. Shown, it is what
/// a message says after the text ([`PointerError::written`]), which the
/// message quotes as it quotes every value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("is not a JSON pointer: it must be \"\" or start with \"/\"")]
    NoLeadingSlash(String),
    #[error("is not a JSON pointer: \"~\" must be followed by 0 or 1")]
    BadEscape(String),
}

impl PointerError {
    /// The text refused, as written.
    pub fn written(&self) -> &str {
        match self {
            PointerError::NoLeadingSlash(text) | PointerError::BadEscape(text) => text,
        }
    }
}

/// `""` (the whole document) or `/`-separated tokens, each `~` escaped as
/// `~0` or `~1`.
pub fn check(text: &str) -> Result<(), PointerError> {
    if !text.is_empty() && !text.starts_with('/') {
        return Err(PointerError::NoLeadingSlash(text.to_owned()));
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(PointerError::BadEscape(text.to_owned()));
        }
    }
    Ok(())
}

/// The unescaped reference tokens of a checked pointer (`/a~1b/0` → `a/b`, `0`).
pub fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_and_splits() {
        assert!(check("").is_ok());
        assert!(check("/a~1b/~0").is_ok());
        assert!(check("id").is_err());
        assert!(check("/a~2").is_err());
        assert_eq!(tokens("/a~1b/~0/~01"), ["a/b", "~", "~1"]);
        assert_eq!(tokens(""), Vec::<String>::new());
        assert_eq!(tokens("/"), [""]);
    }
}

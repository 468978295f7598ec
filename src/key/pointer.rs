//! RFC 6901 JSON pointers as written in the config.

/// `""` (the whole document) or `/`-separated tokens, each `~` escaped as
/// `~0` or `~1`.
pub fn check(text: &str) -> Result<(), String> {
    if !text.is_empty() && !text.starts_with('/') {
        return Err(format!(
            "{text:?} is not a JSON pointer: it must be \"\" or start with \"/\""
        ));
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "{text:?} is not a JSON pointer: \"~\" must be followed by 0 or 1"
            ));
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

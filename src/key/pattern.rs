//! `key_pattern`: the form every key a client sends must have.

use regex::Regex;

/// A `key_pattern` that is not a regex the `regex` crate compiles. Shown,
/// it is what a message says after `text`, which the message quotes as it
/// quotes every value.
#[derive(Debug, Clone, thiserror::Error)]
#[error("is not a valid regex: {}", reason(source))]
pub struct PatternError {
    pub text: String,
    #[source]
    pub source: regex::Error,
}

/// A compiled `key_pattern` (built once per config load).
#[derive(Debug, Clone)]
pub enum KeyPattern {
    /// `"uuid"`: the canonical 8-4-4-4-12 hex form, either case.
    Uuid,
    /// A regex the whole key must match; `source` is as written.
    Regex { source: String, whole: Regex },
}

impl KeyPattern {
    /// `""` is no pattern; `"uuid"` (in any case) the canonical UUID form;
    /// anything else a regex. `"UUID"` as a regex would match only the key
    /// `UUID` and refuse every real one.
    pub fn parse(text: &str) -> Result<Option<Self>, PatternError> {
        match text {
            "" => Ok(None),
            _ if text.eq_ignore_ascii_case("uuid") => Ok(Some(KeyPattern::Uuid)),
            _ => {
                let refused = |source| PatternError {
                    text: text.to_owned(),
                    source,
                };
                // Compiled alone first: a pattern that only compiles inside
                // the anchoring group (`a)|(b`) would escape it and match part
                // of a key, and errors then point into the text as written.
                Regex::new(text).map_err(refused)?;
                // Anchored outside a group, so `a|b` means the whole key is `a` or `b`.
                let whole = Regex::new(&format!(r"\A(?:{text})\z")).map_err(refused)?;
                Ok(Some(KeyPattern::Regex {
                    source: text.to_owned(),
                    whole,
                }))
            }
        }
    }

    pub fn matches(&self, key: &str) -> bool {
        match self {
            KeyPattern::Uuid => is_uuid(key.as_bytes()),
            KeyPattern::Regex { whole, .. } => whole.is_match(key),
        }
    }

    /// As written in the config.
    pub fn as_str(&self) -> &str {
        match self {
            KeyPattern::Uuid => "uuid",
            KeyPattern::Regex { source, .. } => source,
        }
    }
}

impl PartialEq for KeyPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for KeyPattern {}

/// The regex crate's reason in one line: a syntax error is printed over
/// several (the pattern, a caret under the fault, then `error: why`), and a
/// config error is one line.
fn reason(error: &regex::Error) -> String {
    match error {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or(text)
            .to_owned(),
        other => other.to_string(),
    }
}

fn is_uuid(key: &[u8]) -> bool {
    key.len() == 36
        && key.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> KeyPattern {
        KeyPattern::parse(text).unwrap().unwrap()
    }

    #[test]
    fn uuid_either_case() {
        let uuid = pattern("uuid");
        assert!(uuid.matches("8e03978e-40d5-43e8-bc93-6894a57f9324"));
        assert!(uuid.matches("8E03978E-40D5-43E8-BC93-6894A57F9324"));
        assert!(!uuid.matches("8e03978e40d543e8bc936894a57f9324"));
        assert!(!uuid.matches("{8e03978e-40d5-43e8-bc93-6894a57f9324}"));
        assert!(!uuid.matches("8e03978e-40d5-43e8-bc93-6894a57f932g"));
        assert!(!uuid.matches("8e03978e-40d5-43e8-bc93-6894a57f93245"));
    }

    #[test]
    fn uuid_is_the_keyword_in_any_case() {
        for text in ["uuid", "UUID", "Uuid"] {
            let p = pattern(text);
            assert_eq!(p, KeyPattern::Uuid, "{text}");
            assert!(p.matches("8e03978e-40d5-43e8-bc93-6894a57f9324"));
            assert!(!p.matches(text));
        }
    }

    #[test]
    fn regex_matches_whole() {
        let p = pattern("ord_[0-9]+");
        assert!(p.matches("ord_12"));
        assert!(!p.matches("xord_12"));
        assert!(!p.matches("ord_12x"));
        let alt = pattern("a|b");
        assert!(alt.matches("a") && alt.matches("b"));
        assert!(!alt.matches("ab"));
    }

    #[test]
    fn empty_is_none_and_bad_regex_is_refused() {
        assert!(matches!(KeyPattern::parse(""), Ok(None)));
        let Err(error) = KeyPattern::parse("(unclosed") else {
            panic!("an unclosed group is no regex");
        };
        assert_eq!(error.text, "(unclosed");
        assert_eq!(error.to_string(), "is not a valid regex: unclosed group");
    }

    #[test]
    fn a_pattern_cannot_escape_the_anchors() {
        // Wrapped as `\A(?:a)|(b)\z` it would compile and match "xa".
        assert!(KeyPattern::parse("a)|(b").is_err());
    }
}

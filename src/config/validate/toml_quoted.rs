//! toml's and serde's messages repeat what the file wrote: the name of a
//! field it does not know, a string where another type belongs. A long one
//! is shortened as a refused value is (`quoted`): a key or a value of a MiB
//! would otherwise be printed whole.

use crate::config::quoted;

/// The characters of an unknown field's name that a message shows, as
/// many as `quoted` shows of a value.
const SHOWN_CHARS: usize = 64;

const UNKNOWN: &str = "unknown field `";

/// serde's words before a string value it quotes (`string {:?}`).
const STRING: [&str; 2] = ["invalid type: string \"", "invalid value: string \""];

/// The field toml names in "unknown field `name`, expected …".
pub fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix(UNKNOWN)?.split('`').next()
}

/// `message` with a long unknown field's name shortened ("unknown field
/// `aaaa…`… (1048576 bytes), expected …") and a long string quoted by
/// its start and length.
pub fn shortened(message: &str) -> String {
    if let Some(unknown) = unknown_field(message)
        && let Some((end, _)) = unknown.char_indices().nth(SHOWN_CHARS)
    {
        let rest = &message[UNKNOWN.len() + unknown.len()..];
        return format!(
            "{UNKNOWN}{}`… ({} bytes){}",
            &unknown[..end],
            unknown.len(),
            rest.strip_prefix('`').unwrap_or(rest)
        );
    }
    for words in STRING {
        if let Some(at) = message.find(words) {
            let start = at + words.len() - 1;
            if let Some((value, len)) = debug_string(&message[start..]) {
                let rest = &message[start + len..];
                return format!("{}{}{rest}", &message[..start], quoted(&value));
            }
        }
    }
    message.to_owned()
}

/// The string a Rust `{:?}` quoting at the start of `text` stands for, and
/// the bytes of `text` the quoting takes; `None` when it is not one.
fn debug_string(text: &str) -> Option<(String, usize)> {
    let mut rest = text.strip_prefix('"')?;
    let mut value = String::new();
    loop {
        let mut chars = rest.chars();
        match chars.next()? {
            '"' => return Some((value, text.len() - chars.as_str().len())),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                'r' => value.push('\r'),
                't' => value.push('\t'),
                '0' => value.push('\0'),
                'u' => {
                    let (code, after) = chars.as_str().strip_prefix('{')?.split_once('}')?;
                    value.push(char::from_u32(u32::from_str_radix(code, 16).ok()?)?);
                    rest = after;
                    continue;
                }
                other => value.push(other),
            },
            c => value.push(c),
        }
        rest = chars.as_str();
    }
}

#[cfg(test)]
mod tests {
    use super::shortened;

    #[test]
    fn a_short_string_or_field_is_said_as_serde_says_it() {
        for message in [
            "invalid type: string \"a\\\"b\\n\\u{7f}é\", expected a table",
            "unknown field `retentoin`, expected one of `retention`",
            "invalid type: integer `1`, expected a string",
            "invalid type: string \"cut short",
        ] {
            assert_eq!(shortened(message), message);
        }
    }

    #[test]
    fn a_long_string_is_quoted_by_its_start_and_length() {
        let long = "\u{7f}".repeat(100);
        let message = format!("invalid value: string {long:?}, expected a table");
        assert_eq!(
            shortened(&message),
            format!(
                "invalid value: string \"{}\"… (100 bytes), expected a table",
                "\\u{7f}".repeat(64)
            )
        );
    }
}

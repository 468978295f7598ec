//! A key read from a header field: an RFC 8941 string unwrapped (its
//! parameters checked, then ignored), anything else taken as is; then
//! validated.

use super::KeyError;

const MALFORMED: &str = "malformed quoted string";
const NOT_VISIBLE: &str = "contains a character that is not visible ASCII";

/// The key carried by a header value: an RFC 8941 sf-string (`"a b"`, with
/// `\"` and `\\` escapes, parameters after it ignored) is unwrapped to its
/// content, anything else is taken as is; then checked: a bare key is 1–255
/// visible ASCII characters ([`super::validate`]), a quoted one may also hold
/// spaces (RFC 8941 §3.3.3).
pub fn from_header_value(value: &[u8]) -> Result<String, KeyError> {
    let trimmed = trim_ows(value);
    match trimmed.split_first() {
        Some((b'"', rest)) => {
            let (key, after) = unquote(rest)?;
            parameters(after)?;
            super::validate_printable(&key)?;
            Ok(key)
        }
        _ => {
            // Non-UTF-8 bytes are all >= 0x80, i.e. not visible ASCII either.
            let s = std::str::from_utf8(trimmed).map_err(|_| KeyError::Invalid(NOT_VISIBLE))?;
            super::validate(s)?;
            Ok(s.to_owned())
        }
    }
}

/// Whether a header carrying `key` would give another key: an RFC 8941
/// string (`"k1"` gives `k1`). Operators name keys as stored
/// ([`super::as_stored`]); this only explains why such a name found nothing.
pub fn unquotes_in_a_header(key: &str) -> bool {
    key.starts_with('"') && from_header_value(key.as_bytes()).is_ok()
}

/// Strips optional whitespace (SP / HTAB, RFC 9110 OWS) at both ends.
fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let Some((b' ' | b'\t', rest)) = v.split_first() {
        v = rest;
    }
    while let Some((b' ' | b'\t', rest)) = v.split_last() {
        v = rest;
    }
    v
}

/// Parses the rest of an sf-string after its opening quote (RFC 8941
/// §4.2.5): its content, and what follows the closing quote.
fn unquote(rest: &[u8]) -> Result<(String, &[u8]), KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut iter = rest.iter();
    while let Some(&b) = iter.next() {
        match b {
            b'\\' => match iter.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(char::from(c)),
                _ => return Err(KeyError::Invalid(MALFORMED)),
            },
            b'"' => return Ok((out, iter.as_slice())),
            0x20..=0x7E => out.push(char::from(b)),
            _ => return Err(KeyError::Invalid(NOT_VISIBLE)),
        }
    }
    // Ran out of input before the closing quote.
    Err(KeyError::Invalid(MALFORMED))
}

/// RFC 8941 §4.2.3.2 parameters after the item (`;v=2;final`): checked for
/// form, then ignored. Anything else after the closing quote is malformed.
fn parameters(mut rest: &[u8]) -> Result<(), KeyError> {
    while let Some((b';', after)) = rest.split_first() {
        rest = skip_spaces(after);
        let key_len = param_key_len(rest).ok_or(KeyError::Invalid(MALFORMED))?;
        rest = &rest[key_len..];
        if let Some((b'=', after)) = rest.split_first() {
            rest = bare_item(after)?;
        }
    }
    // Spaces may end the field, never come before a `;` (RFC 8941 4.2.3.2).
    if skip_spaces(rest).is_empty() {
        Ok(())
    } else {
        Err(KeyError::Invalid(MALFORMED))
    }
}

fn skip_spaces(mut v: &[u8]) -> &[u8] {
    while let Some((b' ', rest)) = v.split_first() {
        v = rest;
    }
    v
}

/// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
fn param_key_len(v: &[u8]) -> Option<usize> {
    match v.first() {
        Some(b'a'..=b'z' | b'*') => Some(
            v.iter()
                .take_while(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'))
                .count(),
        ),
        _ => None,
    }
}

/// Skips one bare item (a parameter's value): integer or decimal, string,
/// token, byte sequence or boolean. Returns what follows it.
fn bare_item(v: &[u8]) -> Result<&[u8], KeyError> {
    let malformed = KeyError::Invalid(MALFORMED);
    let count = |v: &[u8], ok: fn(&u8) -> bool| v.iter().take_while(|b| ok(b)).count();
    match v.first() {
        Some(b'"') => unquote(&v[1..]).map(|(_, after)| after),
        Some(b'-' | b'0'..=b'9') => {
            // RFC 8941 4.2.4: an integer of at most 15 digits, or a decimal
            // of 1 to 12 integer digits, `.`, and 1 to 3 fraction digits.
            let sign = usize::from(v[0] == b'-');
            let whole = count(&v[sign..], u8::is_ascii_digit);
            let after = &v[sign + whole..];
            match after.first() {
                Some(b'.') => {
                    let fraction = count(&after[1..], u8::is_ascii_digit);
                    if !(1..=12).contains(&whole) || !(1..=3).contains(&fraction) {
                        return Err(malformed);
                    }
                    Ok(&after[1 + fraction..])
                }
                _ if (1..=15).contains(&whole) => Ok(after),
                _ => Err(malformed),
            }
        }
        Some(b'?') => match v.get(1) {
            Some(b'0' | b'1') => Ok(&v[2..]),
            _ => Err(malformed),
        },
        Some(b':') => {
            let body = count(&v[1..], |b| b.is_ascii_alphanumeric() || b"+/=".contains(b));
            match v.get(1 + body) {
                Some(b':') => Ok(&v[2 + body..]),
                _ => Err(malformed),
            }
        }
        Some(b) if b.is_ascii_alphabetic() || *b == b'*' => {
            let token = count(v, |b| {
                b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(b)
            });
            Ok(&v[token..])
        }
        _ => Err(malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::xorshift;

    #[test]
    fn an_operator_names_a_key_as_stored() {
        for key in [
            "k1",
            "\"k1\"",
            "a b",
            " ab",
            "\"q",
            "\"\"",
            r#""\"q""#,
            "\"k1\";v=2",
        ] {
            assert_eq!(crate::key::as_stored(key.as_bytes()), Ok(key), "{key}");
        }
        for refused in [&b""[..], b"a\tb", b"\xff", b"\x01", &[b'k'; 256]] {
            assert!(crate::key::as_stored(refused).is_err(), "{refused:?}");
        }
        for quoted in ["\"k1\"", "\"a b\"", "\"k1\";v=2", r#""\"q""#] {
            assert!(unquotes_in_a_header(quoted), "{quoted}");
        }
        for other in ["k1", "\"q", "\"\"", " \"k1\"", "a\"b\""] {
            assert!(!unquotes_in_a_header(other), "{other}");
        }
    }

    fn ok(v: &[u8]) -> String {
        match from_header_value(v) {
            Ok(k) => k,
            Err(e) => panic!("expected Ok for {v:?}, got {e:?}"),
        }
    }

    fn invalid(v: &[u8]) -> &'static str {
        match from_header_value(v) {
            Err(KeyError::Invalid(msg)) => msg,
            other => panic!("expected Invalid for {v:?}, got {other:?}"),
        }
    }

    #[test]
    fn bare_key() {
        assert_eq!(ok(b"abc"), "abc");
        assert_eq!(ok(b"  abc\t"), "abc");
        assert_eq!(ok(&[b'k'; 255]), "k".repeat(255));
    }

    #[test]
    fn quoted_equals_bare() {
        assert_eq!(ok(b"\"abc\""), ok(b"abc"));
        assert_eq!(ok(b" \"abc\" "), "abc");
    }

    #[test]
    fn escapes() {
        assert_eq!(ok(br#""a\"b""#), "a\"b");
        assert_eq!(ok(br#""a\\b""#), "a\\b");
        assert_eq!(invalid(br#""a\nb""#), MALFORMED);
        assert_eq!(invalid(br#""a\""#), MALFORMED);
        assert_eq!(invalid(br#""a\"#), MALFORMED);
    }

    #[test]
    fn malformed_quoted() {
        assert_eq!(invalid(b"\"abc"), MALFORMED);
        assert_eq!(invalid(b"\""), MALFORMED);
        assert_eq!(invalid(b"\"abc\"x"), MALFORMED);
        assert_eq!(invalid(b"\"a\"\"b\""), MALFORMED);
    }

    #[test]
    fn sf_string_with_space_and_escapes() {
        assert_eq!(ok(b"\"a b\""), "a b");
        assert_eq!(ok(br#""say \"hi\"""#), "say \"hi\"");
        assert_eq!(ok(br#"" \\ ""#), " \\ ");
        // A bare key is as before: no space.
        assert_eq!(invalid(b"a b"), NOT_VISIBLE);
    }

    #[test]
    fn sf_string_parameters_are_ignored() {
        assert_eq!(ok(b"\"k1\";v=2"), "k1");
        assert_eq!(
            ok(b"\"k1\"; v=2;final;t=\"x;y\";n=-1.5;b=?1;s=:aGk=:;*x=tok/en"),
            "k1"
        );
        assert_eq!(invalid(b"\"k1\";"), MALFORMED);
        assert_eq!(invalid(b"\"k1\";V=2"), MALFORMED);
        assert_eq!(invalid(b"\"k1\";v="), MALFORMED);
        assert_eq!(invalid(b"\"k1\";v=2 x"), MALFORMED);
        assert_eq!(invalid(b"\"k1\";v=?2"), MALFORMED);
        assert_eq!(invalid(b"\"k1\";v=:abc"), MALFORMED);
        assert_eq!(invalid(b"\"k1\";v=\"open"), MALFORMED);
    }

    #[test]
    fn empty() {
        assert_eq!(invalid(b""), "empty");
        assert_eq!(invalid(b"   "), "empty");
        assert_eq!(invalid(b"\"\""), "empty");
    }

    #[test]
    fn bad_characters() {
        assert_eq!(invalid(b"a b"), NOT_VISIBLE);
        assert_eq!(invalid(b"a\tb"), NOT_VISIBLE);
        assert_eq!(invalid(b"\"a\tb\""), NOT_VISIBLE);
        assert_eq!(invalid(b"a\x01b"), NOT_VISIBLE);
        assert_eq!(invalid(b"a\x7fb"), NOT_VISIBLE);
        assert_eq!(invalid("clé".as_bytes()), NOT_VISIBLE);
        assert_eq!(invalid("\"clé\"".as_bytes()), NOT_VISIBLE);
        assert_eq!(invalid(b"a\xffb"), NOT_VISIBLE);
        assert_eq!(invalid(b"\"a\xffb\""), NOT_VISIBLE);
    }

    #[test]
    fn numeric_parameters_follow_rfc_8941() {
        for good in [
            "1",
            "-1",
            "123456789012345",
            "0.5",
            "-1.25",
            "123456789012.123",
        ] {
            assert_eq!(ok(format!("\"k\";a={good}").as_bytes()), "k", "{good}");
        }
        for bad in [
            "1234567890123456",
            "1.2345",
            "1234567890123.1",
            "1.",
            "-",
            "-.5",
            ".5",
            "1e5",
            "+1",
        ] {
            assert_eq!(
                invalid(format!("\"k\";a={bad}").as_bytes()),
                MALFORMED,
                "{bad}"
            );
        }
        assert_eq!(ok(b"\"k\"; a=1;b=2  "), "k");
        assert_eq!(invalid(b"\"k\";a=1 ;b=2"), MALFORMED);
    }

    #[test]
    fn length() {
        assert_eq!(invalid(&[b'k'; 256]), "longer than 255 characters");
        let mut quoted = vec![b'"'];
        quoted.extend_from_slice(&[b'k'; 256]);
        quoted.push(b'"');
        assert_eq!(invalid(&quoted), "longer than 255 characters");
    }

    #[test]
    fn never_panics_and_ok_is_valid() {
        // Biased toward the bytes the parser cares about.
        const ALPHABET: &[u8] = b"\"\\ \tab~!\x00\x7f\x80\xff";
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..20_000 {
            let len = (xorshift(&mut seed) % 12) as usize;
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    let r = xorshift(&mut seed);
                    if r.is_multiple_of(4) {
                        (r >> 8) as u8
                    } else {
                        ALPHABET[(r >> 8) as usize % ALPHABET.len()]
                    }
                })
                .collect();
            if let Ok(k) = from_header_value(&v) {
                // A quoted key may hold spaces; nothing else beyond visible ASCII.
                assert!(!k.is_empty() && k.len() <= 255, "{v:?}");
                assert!(k.bytes().all(|b| (0x20..=0x7E).contains(&b)), "{v:?}");
            }
        }
    }
}

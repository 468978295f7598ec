use super::KeyError;

const MALFORMED: &str = "malformed quoted string";
const NOT_VISIBLE: &str = "contains a character that is not visible ASCII";

/// The key carried by a header value: an RFC 8941 sf-string (`"abc"`, with `\"`
/// and `\\` escapes) is unwrapped to its content, anything else is taken as is;
/// then [`super::validate`]d.
pub fn from_header_value(value: &[u8]) -> Result<String, KeyError> {
    let trimmed = trim_ows(value);
    let key = match trimmed.split_first() {
        Some((b'"', rest)) => unquote(rest)?,
        _ => {
            // Non-UTF-8 bytes are all >= 0x80, i.e. not visible ASCII either.
            let s = std::str::from_utf8(trimmed).map_err(|_| KeyError::Invalid(NOT_VISIBLE))?;
            s.to_owned()
        }
    };
    super::validate(&key)?;
    Ok(key)
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

/// Parses the rest of an sf-string after its opening quote (RFC 8941 §4.2.5).
fn unquote(rest: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut iter = rest.iter();
    while let Some(&b) = iter.next() {
        match b {
            b'\\' => match iter.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(char::from(c)),
                _ => return Err(KeyError::Invalid(MALFORMED)),
            },
            b'"' => {
                // The closing quote must end the value: no parameters or
                // trailing garbage are accepted in a key header.
                if iter.as_slice().is_empty() {
                    return Ok(out);
                }
                return Err(KeyError::Invalid(MALFORMED));
            }
            0x20..=0x7E => out.push(char::from(b)),
            _ => return Err(KeyError::Invalid(NOT_VISIBLE)),
        }
    }
    // Ran out of input before the closing quote.
    Err(KeyError::Invalid(MALFORMED))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(invalid(b"\"abc\";p=1"), MALFORMED);
        assert_eq!(invalid(b"\"a\"\"b\""), MALFORMED);
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
        assert_eq!(invalid(b"\"a b\""), NOT_VISIBLE);
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
    fn length() {
        assert_eq!(invalid(&[b'k'; 256]), "longer than 255 characters");
        let mut quoted = vec![b'"'];
        quoted.extend_from_slice(&[b'k'; 256]);
        quoted.push(b'"');
        assert_eq!(invalid(&quoted), "longer than 255 characters");
    }

    /// Deterministic xorshift64 so the property test needs no extra crate.
    fn xorshift(state: &mut u64) -> u64 {
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        x
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
                assert_eq!(super::super::validate(&k), Ok(()), "{v:?}");
            }
        }
    }
}

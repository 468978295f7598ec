//! `application/x-www-form-urlencoded` data (a query string, or a form body)
//! read as the WHATWG URL standard does: `&`-separated `name=value` pairs,
//! `+` a space, then percent-decoding. Values are bytes: decoding never
//! guesses a character encoding.

use std::borrow::Cow;

use percent_encoding::percent_decode;

use super::media_type::media_type;

/// The decoded (name, value) pairs, in order. Empty pieces (`a=1&&b=2`) are
/// skipped; a piece without `=` is a name with an empty value.
pub fn pairs(input: &[u8]) -> impl Iterator<Item = (Cow<'_, [u8]>, Cow<'_, [u8]>)> {
    input
        .split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (name, value) = match memchr::memchr(b'=', piece) {
                Some(at) => (&piece[..at], &piece[at + 1..]),
                None => (piece, &b""[..]),
            };
            (decode(name), decode(value))
        })
}

/// The first value of `name` (a repeated name takes its first value).
pub fn first_value<'a>(input: &'a [u8], name: &str) -> Option<Cow<'a, [u8]>> {
    pairs(input)
        .find(|(n, _)| n.as_ref() == name.as_bytes())
        .map(|(_, value)| value)
}

fn decode(raw: &[u8]) -> Cow<'_, [u8]> {
    if raw.contains(&b'+') {
        let spaced: Vec<u8> = raw
            .iter()
            .map(|&b| if b == b'+' { b' ' } else { b })
            .collect();
        Cow::Owned(Cow::<[u8]>::from(percent_decode(&spaced)).into_owned())
    } else {
        percent_decode(raw).into()
    }
}

/// Whether a `Content-Type` value is `application/x-www-form-urlencoded`
/// (any case, any parameters).
pub fn is_form_urlencoded(content_type: &[u8]) -> bool {
    media_type(content_type).eq_ignore_ascii_case(b"application/x-www-form-urlencoded")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str) -> Vec<(String, String)> {
        pairs(input.as_bytes())
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(&n).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn decodes_plus_and_percent() {
        assert_eq!(
            all("a=1+2&b%20c=%7E%2B&&d&e="),
            [
                ("a".into(), "1 2".into()),
                ("b c".into(), "~+".into()),
                ("d".into(), String::new()),
                ("e".into(), String::new()),
            ]
        );
        assert_eq!(all("x=%zz%4"), [("x".into(), "%zz%4".into())]);
    }

    #[test]
    fn first_value_wins() {
        assert_eq!(
            first_value(b"k=one&k=two", "k").as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(first_value(b"k=one", "K"), None);
        assert_eq!(first_value(b"a+b=1", "a b").as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn content_types() {
        assert!(is_form_urlencoded(b"application/x-www-form-urlencoded"));
        assert!(is_form_urlencoded(
            b"Application/X-WWW-Form-Urlencoded ; charset=utf-8"
        ));
        assert!(!is_form_urlencoded(b"multipart/form-data; boundary=x"));
        assert!(!is_form_urlencoded(b"application/json"));
    }
}

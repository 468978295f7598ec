//! A key read from a JSON body at an RFC 6901 pointer: a string as is, a
//! number by a text that spells its exact value (the one earlier versions
//! gave it, when that does).

use serde_json::{Number, Value};

use super::KeyError;
use super::json_number::{Decimal, shortest_double};

/// The key at an RFC 6901 `pointer` in a JSON body: a string is taken as is, a
/// number by its JSON text (see `number_key`). Not JSON, nothing there, or
/// another type → `Missing`; a value that fails [`super::validate`] → `Invalid`.
pub fn from_json_body(body: &[u8], pointer: &str) -> Result<String, KeyError> {
    // serde_json caps nesting at 128 levels (its default recursion limit), so a
    // hostile deeply nested body is a parse error here, not a stack overflow.
    let doc: Value = serde_json::from_slice(body).map_err(|_| KeyError::Missing)?;
    let key = match doc.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => number_key(n),
        _ => return Err(KeyError::Missing),
    };
    super::validate(&key)?;
    Ok(key)
}

/// The key of a number: the text earlier versions, which read numbers as
/// doubles, gave it, when that text spells the number's exact value (so
/// records they stored keep their keys: `42` → `42`, `-0` → `-0.0`, `1E0` →
/// `1.0`, `1.50` → `1.5`); otherwise the number as written (serde_json's
/// `arbitrary_precision` keeps the text, only writing an exponent as `e+x`
/// or `e-x`).
///
/// Read as the nearest `f64` and printed shortest, as earlier versions did
/// with a number that is no `u64`/`i64`, `12345678901234567890123` and
/// `12345678901234567890124` would both be `1.2345678901234568e+22`: two
/// events, one key. Every key spells its number's exact value instead, so two
/// different numbers never share a key. (What remains of that collision: a
/// record an earlier version stored under `1.2345678901234568e+22` for
/// `12345678901234567890123` is found by a body whose number is
/// `1.2345678901234568e22` itself.)
pub(super) fn number_key(n: &Number) -> String {
    let text = n.as_str();
    let integer = !text.contains(['.', 'e', 'E']) && text != "-0";
    let old = if integer && (text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok()) {
        Some(text.to_owned())
    } else {
        shortest_double(text)
    };
    match (old, Decimal::parse(text)) {
        (Some(old), Some(value)) if Decimal::parse(&old).as_ref() == Some(&value) => old,
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::json_number::OLD_FORMS;
    use crate::key::xorshift;

    fn get(body: &str, pointer: &str) -> Result<String, KeyError> {
        from_json_body(body.as_bytes(), pointer)
    }

    #[test]
    fn string_and_number() {
        assert_eq!(get(r#"{"id":"abc"}"#, "/id"), Ok("abc".into()));
        assert_eq!(get(r#"{"id":42}"#, "/id"), Ok("42".into()));
        assert_eq!(get(r#"{"id":-7}"#, "/id"), Ok("-7".into()));
        assert_eq!(get(r#"{"id":1.5}"#, "/id"), Ok("1.5".into()));
        assert_eq!(get(r#""whole""#, ""), Ok("whole".into()));
    }

    /// The entries of [`OLD_FORMS`] whose old key did not spell the number
    /// exactly (or was missing), with their new key: the number as written
    /// (serde_json writes an exponent as `e+` or `e-`). Every other key is
    /// unchanged.
    const CHANGED: &[(&str, &str)] = &[
        ("12345678901234567.0", "12345678901234567.0"),
        ("18446744073709551615.0", "18446744073709551615.0"),
        ("18446744073709551616", "18446744073709551616"),
        ("-9223372036854775809", "-9223372036854775809"),
        ("99999999999999999999", "99999999999999999999"),
        ("999999999999999999999", "999999999999999999999"),
        ("12345678901234567890123", "12345678901234567890123"),
        ("12345678901234567890124", "12345678901234567890124"),
        ("0.1000000000000000001", "0.1000000000000000001"),
        (
            "0.1000000000000000055511151231257827021181583404541015625",
            "0.1000000000000000055511151231257827021181583404541015625",
        ),
        ("0.99999999999999999999", "0.99999999999999999999"),
        ("1e-400", "1e-400"),
        ("-1e-400", "-1e-400"),
        ("1e400", "1e+400"),
        ("-1e400", "-1e+400"),
        ("1e99999999999999999999", "1e+99999999999999999999"),
        ("1e-99999999999999999999", "1e-99999999999999999999"),
    ];

    #[test]
    fn number_keys_that_were_exact_are_unchanged() {
        for &(number, _, today) in OLD_FORMS {
            let got = get(&format!(r#"{{"id":{number}}}"#), "/id");
            match CHANGED.iter().find(|(n, _)| *n == number) {
                Some((_, new)) => assert_eq!(got, Ok((*new).to_owned()), "{number}"),
                None => assert_eq!(got.ok().as_deref(), today, "{number}"),
            }
        }
        for (number, _) in CHANGED {
            assert!(
                OLD_FORMS.iter().any(|(n, _, _)| n == number),
                "{number} not in OLD_FORMS"
            );
        }
    }

    #[test]
    fn different_numbers_never_share_a_key() {
        let key = |n: &str| get(&format!(r#"{{"id":{n}}}"#), "/id");
        for (a, b) in [
            ("12345678901234567890123", "12345678901234567890124"),
            ("12345678901234567890123", "1.2345678901234568e22"),
            ("18446744073709551616", "18446744073709551617"),
            ("-9223372036854775809", "-9223372036854775808"),
            ("0.1000000000000000001", "0.1"),
            ("1e-400", "0"),
        ] {
            assert_ne!(key(a), key(b), "{a} vs {b}");
        }
        // Every key spells its number's exact value.
        for &(number, _, _) in OLD_FORMS {
            if let Ok(k) = key(number) {
                assert_eq!(
                    Decimal::parse(&k),
                    Decimal::parse(number),
                    "{number} -> {k}"
                );
            }
        }
        // Big integer ids keep every digit.
        assert_eq!(
            key("123456789012345678901234567890"),
            Ok("123456789012345678901234567890".into())
        );
        // serde_json writes the exponent of a number it keeps as text as
        // `e+` or `e-`.
        assert_eq!(
            key("1.00000000000000000001E5"),
            Ok("1.00000000000000000001e+5".into())
        );
    }

    /// The key earlier versions give a number: the digits of a `u64`/`i64`,
    /// else the nearest double printed shortest (`None`: refused).
    fn old_key(text: &str) -> Option<String> {
        if !text.contains(['.', 'e', 'E'])
            && text != "-0"
            && (text.parse::<u64>().is_ok() || text.parse::<i64>().is_ok())
        {
            return Some(text.to_owned());
        }
        let f: f64 = text.parse().ok()?;
        serde_json::Number::from_f64(f).map(|n| n.to_string())
    }

    proptest::proptest! {
        #[test]
        fn number_keys_spell_their_number_and_keep_exact_old_keys(
            text in "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?"
        ) {
            let key = get(&format!(r#"{{"id":{text}}}"#), "/id");
            proptest::prop_assert!(key.is_ok(), "{}: {:?}", text, key);
            let key = key.unwrap_or_default();
            let value = Decimal::parse(&text);
            proptest::prop_assert_eq!(Decimal::parse(&key), value.clone(), "{} -> {}", text, key);
            if let Some(old) = old_key(&text).filter(|old| Decimal::parse(old) == value) {
                proptest::prop_assert_eq!(key, old, "{}", text);
            }
        }
    }

    #[test]
    fn nested_and_escaped_segments() {
        assert_eq!(get(r#"{"data":{"id":"n1"}}"#, "/data/id"), Ok("n1".into()));
        assert_eq!(get(r#"{"a/b":"slash"}"#, "/a~1b"), Ok("slash".into()));
        assert_eq!(get(r#"{"a~b":"tilde"}"#, "/a~0b"), Ok("tilde".into()));
        assert_eq!(get(r#"{"items":["x","y"]}"#, "/items/1"), Ok("y".into()));
    }

    #[test]
    fn missing() {
        assert_eq!(get(r#"{"other":"x"}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":null}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":true}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":{"x":1}}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":["x"]}"#, "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"}"#, ""), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"}"#, "id"), Err(KeyError::Missing));
        assert_eq!(get("not json", "/id"), Err(KeyError::Missing));
        assert_eq!(get("", "/id"), Err(KeyError::Missing));
        assert_eq!(get(r#"{"id":"x"} trailing"#, "/id"), Err(KeyError::Missing));
        assert_eq!(
            from_json_body(b"{\"id\":\"\xff\"}", "/id"),
            Err(KeyError::Missing)
        );
    }

    #[test]
    fn invalid() {
        assert_eq!(get(r#"{"id":""}"#, "/id"), Err(KeyError::Invalid("empty")));
        assert!(matches!(
            get(r#"{"id":"a b"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        assert!(matches!(
            get(r#"{"id":"\u0001"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        assert!(matches!(
            get(r#"{"id":"clé"}"#, "/id"),
            Err(KeyError::Invalid(_))
        ));
        let long = format!(r#"{{"id":"{}"}}"#, "k".repeat(256));
        assert_eq!(
            get(&long, "/id"),
            Err(KeyError::Invalid("longer than 255 characters"))
        );
    }

    #[test]
    fn deep_nesting_is_missing_not_a_crash() {
        let depth = 10_000;
        let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(get(&body, "/0"), Err(KeyError::Missing));
        let body = format!("{}\"k\"{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        assert_eq!(get(&body, "/a"), Err(KeyError::Missing));
        // Within the limit, nesting is fine.
        let body = format!("{}\"k\"{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(get(&body, &"/0".repeat(100)), Ok("k".into()));
    }

    #[test]
    fn never_panics() {
        const ALPHABET: &[u8] = b"{}[]\":,0123456789.-eE\\ u/~ab\x00\xff";
        const POINTERS: &[&str] = &["", "/", "/a", "/0", "/a/0", "/~1", "/~0", "/~2", "a"];
        let mut seed = 0x2545_F491_4F6C_DD1D_u64;
        for i in 0..20_000 {
            let len = (xorshift(&mut seed) % 24) as usize;
            let body: Vec<u8> = (0..len)
                .map(|_| ALPHABET[(xorshift(&mut seed) >> 8) as usize % ALPHABET.len()])
                .collect();
            let pointer = POINTERS[i % POINTERS.len()];
            if let Ok(k) = from_json_body(&body, pointer) {
                assert_eq!(super::super::validate(&k), Ok(()));
            }
        }
    }
}

//! Keys derived from business identifiers: a UUIDv5 (RFC 9562 §5.5) under
//! the route's namespace, of a name built from the listed parts' values.
//!
//! The name is each value in list order, written as its byte length in
//! decimal, `:`, then its bytes; so `["ab", "c"]` (`2:ab1:c`) and
//! `["a", "bc"]` (`1:a2:bc`) never share a name.

use serde_json::{Number, Value};
use uuid::Uuid;

/// The name hashed for these part values, in order.
pub fn name<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut name = Vec::new();
    for value in values {
        name.extend_from_slice(value.len().to_string().as_bytes());
        name.push(b':');
        name.extend_from_slice(value);
    }
    name
}

/// The derived key: the UUIDv5 of `name(values)` under `namespace`, in its
/// canonical lower-case 8-4-4-4-12 form.
pub fn derive<'a>(namespace: &Uuid, values: impl IntoIterator<Item = &'a [u8]>) -> String {
    Uuid::new_v5(namespace, &name(values))
        .hyphenated()
        .to_string()
}

/// The bytes a JSON value contributes to the name: a string unescaped, a
/// number in its RFC 8785 form; anything else (or a number out of a
/// double's range, which has none) counts as missing.
pub fn json_part(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Number(n) => es_number(n).map(String::into_bytes),
        _ => None,
    }
}

/// A number as RFC 8785 writes it: the ECMAScript `Number.prototype.toString`
/// of the nearest double (`1.0` → `1`, `1e21` → `1e+21`, `0.0000001` → `1e-7`).
fn es_number(n: &Number) -> Option<String> {
    let x: f64 = n.as_str().parse().ok()?;
    if !x.is_finite() {
        return None;
    }
    if x == 0.0 {
        return Some("0".to_owned());
    }
    // Rust's `{:e}` is the shortest text that reads back as `x`: the digits
    // and exponent ECMAScript's algorithm starts from.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e')?;
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i64 = exponent.parse().ok()?;
    let k = i64::try_from(digits.len()).ok()?;
    let n = exponent + 1;
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', usize::try_from(n - k).ok()?));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).ok()?);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-n).ok()?));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        out.push_str(&e.abs().to_string());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(text: &str) -> Option<String> {
        let value: Value = serde_json::from_str(text).unwrap();
        match value {
            Value::Number(n) => es_number(&n),
            _ => None,
        }
    }

    /// Values from RFC 8785 appendix B and ECMAScript's own examples.
    #[test]
    fn numbers_in_rfc_8785_form() {
        for (input, expected) in [
            ("0", "0"),
            ("-0", "0"),
            ("1", "1"),
            ("1.0", "1"),
            ("42", "42"),
            ("-7", "-7"),
            ("1.5", "1.5"),
            ("0.1", "0.1"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345680000", "123456789012345680000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1E-7", "1e-7"),
            ("-1.5e-10", "-1.5e-10"),
            ("9007199254740993", "9007199254740992"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("5e-324", "5e-324"),
            ("333333333.33333329", "333333333.3333333"),
        ] {
            assert_eq!(es(input).as_deref(), Some(expected), "{input}");
        }
        assert_eq!(es("1e400"), None);
    }

    #[test]
    fn name_is_length_prefixed() {
        assert_eq!(name([&b"ord_1"[..], b"cus_9"]), b"5:ord_15:cus_9");
        assert_ne!(name([&b"ab"[..], b"c"]), name([&b"a"[..], b"bc"]));
        assert_eq!(name(std::iter::empty()), b"");
        assert_eq!(name(["é".as_bytes()]), "2:é".as_bytes());
    }

    /// Python: `uuid.uuid5(uuid.NAMESPACE_URL, "5:ord_15:cus_9")`.
    #[test]
    fn uuid_v5_of_the_name() {
        let key = derive(&Uuid::NAMESPACE_URL, [&b"ord_1"[..], b"cus_9"]);
        assert_eq!(key, "c7ae7ae9-9d13-5ce2-8353-857d03a12457");
    }

    #[test]
    fn json_parts() {
        let v: Value = serde_json::from_str(r#"{"s":"a\"b","n":1.0,"t":true,"z":null}"#).unwrap();
        assert_eq!(json_part(&v["s"]).as_deref(), Some(&b"a\"b"[..]));
        assert_eq!(json_part(&v["n"]).as_deref(), Some(&b"1"[..]));
        assert_eq!(json_part(&v["t"]), None);
        assert_eq!(json_part(&v["z"]), None);
    }
}

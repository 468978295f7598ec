//! Canonical JSON for fingerprints: two bodies that mean the same JSON value
//! serialize to the same bytes.
//!
//! Close to RFC 8785 (JCS), simplified:
//! - objects: keys sorted by their UTF-8 bytes (JCS sorts by UTF-16 code units;
//!   the two orders differ only for characters above U+FFFF vs U+E000..U+FFFF);
//! - no insignificant whitespace;
//! - strings: `"` and `\` escaped, `\b \t \n \f \r` by their short escape,
//!   other control characters as `\u00xx`, everything else as raw UTF-8 (so
//!   `"\u0041"` and `"A"` are equal);
//! - numbers by value: integers as decimal digits; a float with an integral
//!   value below 1e21 in magnitude as the integer it equals (so `1`, `1.0`,
//!   `1.00` and `1e0` are all equal, as in JCS, and `-0.0` is `0`); other floats
//!   by their shortest round-trip form (ryu, via serde_json), whose exponent
//!   spelling differs from JCS (`1e21` rather than `1e+21`) but is stable.
//!   Parsing is correctly rounded (serde_json's `float_roundtrip` feature), so
//!   every spelling of a number reaches the same double.

use serde_json::{Number, Value};
use std::io::Write;

/// Appends the canonical serialization of `value` to `out`.
///
/// Recursive: meant for values parsed by serde_json, whose default recursion
/// limit (128) bounds the depth.
pub fn canonicalize(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => number(n, out),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonicalize(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            // Sort explicitly: serde_json's map order depends on its
            // `preserve_order` feature, which another crate could turn on.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out);
                out.push(b':');
                canonicalize(v, out);
            }
            out.push(b'}');
        }
    }
}

/// Integral floats below this magnitude are written as integers (JCS prints
/// integral doubles under 1e21 without exponent or fraction).
const INTEGRAL_FLOAT_LIMIT: f64 = 1e21;

fn number(n: &Number, out: &mut Vec<u8>) {
    // Writes into a Vec cannot fail; the results are ignored for that reason.
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        if f.fract() == 0.0 && f.abs() < INTEGRAL_FLOAT_LIMIT {
            // Exact: an integral f64 under 1e21 fits i128 without rounding.
            let _ = write!(out, "{}", f as i128);
        } else {
            // serde_json's Display for a float is ryu's shortest round-trip.
            let _ = write!(out, "{n}");
        }
    } else {
        // Unreachable without serde_json's `arbitrary_precision`; fall back
        // to the number's own text, which is still deterministic.
        let _ = write!(out, "{n}");
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in s.as_bytes() {
        // Only ASCII bytes are escaped; multi-byte UTF-8 sequences (all bytes
        // >= 0x80) pass through unchanged.
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0C => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0x00..=0x1F => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xF)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(json: &str) -> String {
        let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
        let mut out = Vec::new();
        canonicalize(&v, &mut out);
        String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(canon(r#"{ "b": 2, "a": 1 }"#), r#"{"a":1,"b":2}"#);
        assert_eq!(
            canon(r#"{"z":{"y":[1, 2, {"b":null,"a":true}]},"a":false}"#),
            r#"{"a":false,"z":{"y":[1,2,{"a":true,"b":null}]}}"#
        );
        assert_eq!(canon("[ ]"), "[]");
        assert_eq!(canon(" { } "), "{}");
    }

    #[test]
    fn strings() {
        assert_eq!(canon(r#""\u0041""#), r#""A""#);
        assert_eq!(canon(r#""\/""#), r#""/""#);
        assert_eq!(canon(r#""\u00e9""#), "\"é\"");
        assert_eq!(canon(r#""a\"b\\c""#), r#""a\"b\\c""#);
        assert_eq!(
            canon(r#""\u0008\u0009\u000a\u000c\u000d""#),
            r#""\b\t\n\f\r""#
        );
        assert_eq!(canon(r#""\u0001\u001F""#), r#""\u0001\u001f""#);
        assert_eq!(canon(r#""\ud83d\ude00""#), "\"😀\"");
        assert_eq!(canon(r#"{"\u0062":1,"a":2}"#), r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn numbers() {
        assert_eq!(canon("1"), "1");
        assert_eq!(canon("1.0"), "1");
        assert_eq!(canon("1.00"), "1");
        assert_eq!(canon("1e0"), "1");
        assert_eq!(canon("100E-2"), "1");
        assert_eq!(canon("-0.0"), "0");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-5"), "-5");
        assert_eq!(canon("1.5"), "1.5");
        assert_eq!(canon("1.50"), "1.5");
        assert_eq!(canon("0.1"), "0.1");
        assert_eq!(canon("18446744073709551615"), "18446744073709551615");
        assert_eq!(canon("-9223372036854775808"), "-9223372036854775808");
        assert_eq!(canon("1e20"), "100000000000000000000");
        assert_eq!(canon("1e21"), canon("1.0e21"));
        assert_eq!(canon("1.5e300"), canon("15e299"));
    }

    #[test]
    fn float_spellings_parse_alike() {
        // Found by tests/fuzz.rs: without serde_json's `float_roundtrip`, its
        // fast float parser is off by an ULP for some spellings, so one value
        // written two ways got two fingerprints (a false 422).
        assert_eq!(
            canon("1.947700395895162e-169"),
            canon("1947700395895162000e-187")
        );
        assert_eq!(
            canon("-4.6561847810009213e-38"),
            canon("-46561847810009213000e-57")
        );
        assert_eq!(canon("1.870897432200965e-250"), "1.870897432200965e-250");
    }

    #[test]
    fn literals() {
        assert_eq!(canon("[true,false,null]"), "[true,false,null]");
    }

    #[test]
    fn output_reparses_to_the_same_value() {
        let json = r#"{"k":[1,-2,3.25,1e300,"x\ny",{"\u0000":null}],"e":""}"#;
        let out = canon(json);
        let a: Value = serde_json::from_str(json).unwrap_or_default();
        let b: Value = serde_json::from_str(&out).unwrap_or_default();
        assert_eq!(a, b);
        assert_eq!(canon(&out), out);
    }
}

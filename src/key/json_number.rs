//! Exact values of JSON number texts, for the canonical JSON of fingerprints
//! and for JSON-pointer keys.
//!
//! serde_json, with its `arbitrary_precision` feature, hands over a number that
//! does not fit `u64`/`i64` as the text it was written with. Here such a text is
//! read as the exact decimal value it spells, never through an `f64`: two
//! numbers that differ only past a double's 17 significant digits
//! (`12345678901234567890123` and `12345678901234567890124`, `0.1` and
//! `0.1000000000000000001`) stay two values.

use serde_json::Number;

/// The exact value of a JSON number: `±digits × 10^exponent`, with `digits`
/// free of leading and trailing zeros. Zero is `digits` empty, `exponent` 0 and
/// not negative, whatever its spelling (`0`, `-0.0`, `0e9`), so equal values
/// are equal structs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    /// ASCII digits, the first and the last not `0`.
    digits: String,
    exponent: i64,
}

/// An exponent with more significant digits than this (10^18 and beyond) is
/// refused unless the number is zero: such a number is far outside the range
/// of a double either way, and the callers fall back (see [`Decimal::parse`]).
const MAX_EXPONENT_DIGITS: usize = 18;

impl Decimal {
    /// The value of a JSON number text (RFC 8259 grammar: `-`? int frac? exp?).
    /// `None` if `text` is not one, or if it is non-zero with an exponent of
    /// 10^18 or more in magnitude (no double is near it; the callers then hash
    /// raw bytes or keep the text as written).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent_text) = match unsigned.split_once(['e', 'E']) {
            Some((mantissa, exponent)) => (mantissa, Some(exponent)),
            None => (unsigned, None),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((int, frac)) => (int, Some(frac)),
            None => (mantissa, None),
        };
        if !all_digits(int) || (int.len() > 1 && int.starts_with('0')) {
            return None;
        }
        let frac = match frac {
            Some(frac) if !all_digits(frac) => return None,
            Some(frac) => frac,
            None => "",
        };
        let exponent_digits = match exponent_text {
            Some(e) => {
                let (minus, digits) = match e.as_bytes().first() {
                    Some(b'-') => (true, &e[1..]),
                    Some(b'+') => (false, &e[1..]),
                    _ => (false, e),
                };
                if !all_digits(digits) {
                    return None;
                }
                Some((minus, digits))
            }
            None => None,
        };

        let mut digits: String = int
            .chars()
            .chain(frac.chars())
            .skip_while(|&c| c == '0')
            .collect();
        if digits.is_empty() {
            return Some(Self::zero());
        }
        let significant = digits.trim_end_matches('0').len();
        let trailing = digits.len() - significant;
        digits.truncate(significant);

        let written = match exponent_digits {
            None => 0,
            Some((minus, e)) => {
                let e = e.trim_start_matches('0');
                if e.len() > MAX_EXPONENT_DIGITS {
                    return None;
                }
                // At most 18 digits: fits an i64 (an empty string is 0).
                let magnitude: i64 = if e.is_empty() { 0 } else { e.parse().ok()? };
                if minus { -magnitude } else { magnitude }
            }
        };
        let exponent = written
            .checked_sub(i64::try_from(frac.len()).ok()?)?
            .checked_add(i64::try_from(trailing).ok()?)?;
        Some(Self {
            negative,
            digits,
            exponent,
        })
    }

    fn zero() -> Self {
        Self {
            negative: false,
            digits: String::new(),
            exponent: 0,
        }
    }

    /// An integer below 10^21 in magnitude (zero included): one JCS, and so
    /// the canonical form, writes without exponent or fraction.
    pub(crate) fn is_integer_below_1e21(&self) -> bool {
        self.exponent >= 0
            && i64::try_from(self.digits.len())
                .is_ok_and(|len| len.saturating_add(self.exponent) <= 21)
    }

    /// Writes the integer's decimal digits; for [`Self::is_integer_below_1e21`]
    /// values (the exponent is then at most 21).
    pub(crate) fn write_integer(&self, out: &mut Vec<u8>) {
        if self.digits.is_empty() {
            out.push(b'0');
            return;
        }
        if self.negative {
            out.push(b'-');
        }
        out.extend_from_slice(self.digits.as_bytes());
        let zeros = usize::try_from(self.exponent).unwrap_or(0).min(21);
        out.resize(out.len() + zeros, b'0');
    }

    /// Writes `d.ddde±x` (`de±x` for one digit): the exact value, in a form
    /// fixed by the value alone (first digit before the point, no trailing
    /// zeros, the exponent's sign always written).
    pub(crate) fn write_scientific(&self, out: &mut Vec<u8>) {
        let Some((first, rest)) = self.digits.split_at_checked(1) else {
            out.push(b'0');
            return;
        };
        if self.negative {
            out.push(b'-');
        }
        out.extend_from_slice(first.as_bytes());
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest.as_bytes());
        }
        // i128: the exponent (|e| < 10^18 + text length) plus the digit count
        // cannot overflow it.
        let len = i128::try_from(rest.len()).unwrap_or(i128::MAX);
        let exponent = i128::from(self.exponent).saturating_add(len);
        out.push(b'e');
        out.push(if exponent < 0 { b'-' } else { b'+' });
        out.extend_from_slice(exponent.unsigned_abs().to_string().as_bytes());
    }

    /// Other spellings of the same value, for tests.
    #[cfg(test)]
    pub(crate) fn spellings(&self) -> Vec<String> {
        let sign = if self.negative { "-" } else { "" };
        if self.digits.is_empty() {
            return ["0", "-0", "0.000", "-0e7", "0E-3"]
                .map(String::from)
                .to_vec();
        }
        let (d, e) = (&self.digits, self.exponent);
        let (first, rest) = d.split_at(1);
        let len = i64::try_from(d.len()).unwrap_or(0);
        vec![
            format!("{sign}{d}e{e}"),
            format!("{sign}{d}000E{}", e - 3),
            format!("{sign}0.{d}e{}", e + len),
            format!("{sign}{first}.{rest}00e{}", e + len - 1),
        ]
    }
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The shortest text that reads back as the double nearest to `text` (a JSON
/// number), as serde_json prints an `f64`; `None` if that double is infinite.
/// This is how earlier versions spell numbers: the forms of it that spell
/// their number exactly are kept, so the fingerprints and keys those versions
/// stored still match.
pub(crate) fn shortest_double(text: &str) -> Option<String> {
    // std's parse rounds correctly, as serde_json's `float_roundtrip` does.
    let double: f64 = text.parse().ok()?;
    Number::from_f64(double).map(|n| n.to_string())
}

/// What earlier versions, which read numbers as doubles, make of numbers
/// (recorded by running their code): the number's text, its canonical JSON form (`None`:
/// no canonical form, the bytes were hashed) and its JSON-pointer key from
/// `{"id":NUMBER}` (`None`: missing, the body was refused). Stored
/// fingerprints and keys carry these forms, so the tests of both
/// (canonical_json, json_pointer) pin every exact one.
#[cfg(test)]
pub(crate) const OLD_FORMS: &[(&str, Option<&str>, Option<&str>)] = &[
    ("0", Some("0"), Some("0")),
    ("-0", Some("0"), Some("-0.0")),
    ("0.0", Some("0"), Some("0.0")),
    ("-0.0", Some("0"), Some("-0.0")),
    ("0e0", Some("0"), Some("0.0")),
    ("0E+5", Some("0"), Some("0.0")),
    ("-0e-5", Some("0"), Some("-0.0")),
    ("0e400", Some("0"), Some("0.0")),
    ("0.000e-99999999999999999999", Some("0"), Some("0.0")),
    ("1", Some("1"), Some("1")),
    ("-1", Some("-1"), Some("-1")),
    ("1.0", Some("1"), Some("1.0")),
    ("1.00", Some("1"), Some("1.0")),
    ("1e0", Some("1"), Some("1.0")),
    ("1E0", Some("1"), Some("1.0")),
    ("1e+0", Some("1"), Some("1.0")),
    ("10e-1", Some("1"), Some("1.0")),
    ("100E-2", Some("1"), Some("1.0")),
    ("-5", Some("-5"), Some("-5")),
    ("42", Some("42"), Some("42")),
    ("1.5", Some("1.5"), Some("1.5")),
    ("1.50", Some("1.5"), Some("1.5")),
    ("15e-1", Some("1.5"), Some("1.5")),
    ("0.1", Some("0.1"), Some("0.1")),
    ("0.10", Some("0.1"), Some("0.1")),
    ("1e-1", Some("0.1"), Some("0.1")),
    ("0.5", Some("0.5"), Some("0.5")),
    ("0.25", Some("0.25"), Some("0.25")),
    ("12.34", Some("12.34"), Some("12.34")),
    ("99.99", Some("99.99"), Some("99.99")),
    ("-12.34", Some("-12.34"), Some("-12.34")),
    ("0.3", Some("0.3"), Some("0.3")),
    ("3.14159", Some("3.14159"), Some("3.14159")),
    ("2e-3", Some("0.002"), Some("0.002")),
    ("1e-7", Some("1e-7"), Some("1e-7")),
    ("1.5e-7", Some("1.5e-7"), Some("1.5e-7")),
    ("0.000001", Some("1e-6"), Some("1e-6")),
    (
        "123456789.123",
        Some("123456789.123"),
        Some("123456789.123"),
    ),
    ("4.35", Some("4.35"), Some("4.35")),
    ("1e15", Some("1000000000000000"), Some("1000000000000000.0")),
    ("1e16", Some("10000000000000000"), Some("1e+16")),
    ("1.0e16", Some("10000000000000000"), Some("1e+16")),
    ("1e20", Some("100000000000000000000"), Some("1e+20")),
    ("1e21", Some("1e+21"), Some("1e+21")),
    ("1.0e21", Some("1e+21"), Some("1e+21")),
    ("1e22", Some("1e+22"), Some("1e+22")),
    ("1e23", Some("1e+23"), Some("1e+23")),
    ("1.5e300", Some("1.5e+300"), Some("1.5e+300")),
    ("15e299", Some("1.5e+300"), Some("1.5e+300")),
    ("1e300", Some("1e+300"), Some("1e+300")),
    ("-1e300", Some("-1e+300"), Some("-1e+300")),
    ("5e-324", Some("5e-324"), Some("5e-324")),
    (
        "2.2250738585072014e-308",
        Some("2.2250738585072014e-308"),
        Some("2.2250738585072014e-308"),
    ),
    (
        "1.7976931348623157e308",
        Some("1.7976931348623157e+308"),
        Some("1.7976931348623157e+308"),
    ),
    (
        "9007199254740992",
        Some("9007199254740992"),
        Some("9007199254740992"),
    ),
    (
        "9007199254740993",
        Some("9007199254740993"),
        Some("9007199254740993"),
    ),
    (
        "12345678901234567",
        Some("12345678901234567"),
        Some("12345678901234567"),
    ),
    (
        "12345678901234567.0",
        Some("12345678901234568"),
        Some("1.2345678901234568e+16"),
    ),
    (
        "123456789012345678",
        Some("123456789012345678"),
        Some("123456789012345678"),
    ),
    (
        "18446744073709551615",
        Some("18446744073709551615"),
        Some("18446744073709551615"),
    ),
    (
        "18446744073709551615.0",
        Some("18446744073709551616"),
        Some("1.8446744073709552e+19"),
    ),
    (
        "18446744073709551616",
        Some("18446744073709551616"),
        Some("1.8446744073709552e+19"),
    ),
    (
        "-9223372036854775808",
        Some("-9223372036854775808"),
        Some("-9223372036854775808"),
    ),
    (
        "-9223372036854775809",
        Some("-9223372036854775808"),
        Some("-9.223372036854776e+18"),
    ),
    (
        "99999999999999999999",
        Some("100000000000000000000"),
        Some("1e+20"),
    ),
    ("999999999999999999999", Some("1e+21"), Some("1e+21")),
    ("1000000000000000000000", Some("1e+21"), Some("1e+21")),
    (
        "12345678901234567890123",
        Some("1.2345678901234568e+22"),
        Some("1.2345678901234568e+22"),
    ),
    (
        "12345678901234567890124",
        Some("1.2345678901234568e+22"),
        Some("1.2345678901234568e+22"),
    ),
    (
        "1.2345678901234568e22",
        Some("1.2345678901234568e+22"),
        Some("1.2345678901234568e+22"),
    ),
    ("0.1000000000000000001", Some("0.1"), Some("0.1")),
    (
        "0.1000000000000000055511151231257827021181583404541015625",
        Some("0.1"),
        Some("0.1"),
    ),
    ("0.99999999999999999999", Some("1"), Some("1.0")),
    (
        "1.947700395895162e-169",
        Some("1.947700395895162e-169"),
        Some("1.947700395895162e-169"),
    ),
    (
        "1947700395895162000e-187",
        Some("1.947700395895162e-169"),
        Some("1.947700395895162e-169"),
    ),
    (
        "1.870897432200965e-250",
        Some("1.870897432200965e-250"),
        Some("1.870897432200965e-250"),
    ),
    ("1e-400", Some("0"), Some("0.0")),
    ("-1e-400", Some("0"), Some("-0.0")),
    ("1e400", None, None),
    ("-1e400", None, None),
    ("1e99999999999999999999", None, None),
    ("1e-99999999999999999999", Some("0"), Some("0.0")),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Decimal {
        Decimal::parse(text).unwrap_or_else(|| panic!("{text}"))
    }

    #[test]
    fn equal_values_parse_equal() {
        for (a, b) in [
            ("1", "1.0"),
            ("1", "1e0"),
            ("1", "10e-1"),
            ("1", "100E-2"),
            ("1", "0.01e+2"),
            ("0", "-0"),
            ("0", "-0.0e-5"),
            ("0", "0e99999999999999999999999"),
            ("12.5", "1250e-2"),
            ("-3e-7", "-0.0000003"),
            ("1e5", "1e0005"),
        ] {
            assert_eq!(dec(a), dec(b), "{a} {b}");
        }
    }

    #[test]
    fn different_values_parse_different() {
        for (a, b) in [
            ("12345678901234567890123", "12345678901234567890124"),
            ("0.1", "0.1000000000000000001"),
            ("1", "-1"),
            ("1e5", "1e6"),
            ("1.5", "15"),
        ] {
            assert_ne!(dec(a), dec(b), "{a} {b}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_json_number() {
        for text in [
            "", "-", "+1", "01", "1.", ".5", "1e", "1e+", "1.e5", "0x10", "1 ", "inf", "NaN",
            "1_0", "--1", "1e5.5",
        ] {
            assert_eq!(Decimal::parse(text), None, "{text:?}");
        }
        // A non-zero number with an exponent of 10^18 and more: refused.
        assert_eq!(Decimal::parse("1e1000000000000000000"), None);
        assert_eq!(Decimal::parse("1e-1000000000000000000"), None);
        assert!(Decimal::parse("1e999999999999999999").is_some());
        assert!(Decimal::parse("1e-000000000000000000000000000001").is_some());
    }

    #[test]
    fn scientific_and_integer_forms() {
        let write = |text: &str, scientific: bool| {
            let mut out = Vec::new();
            if scientific {
                dec(text).write_scientific(&mut out);
            } else {
                dec(text).write_integer(&mut out);
            }
            String::from_utf8(out).unwrap_or_default()
        };
        assert_eq!(
            write("12345678901234567890123", true),
            "1.2345678901234567890123e+22"
        );
        assert_eq!(
            write("0.1000000000000000001", true),
            "1.000000000000000001e-1"
        );
        assert_eq!(write("-1e-400", true), "-1e-400");
        assert_eq!(write("2.5", true), "2.5e+0");
        assert_eq!(write("1e20", false), "100000000000000000000");
        assert_eq!(write("-0.0", false), "0");
        assert_eq!(write("-120.0", false), "-120");
        assert!(dec("999999999999999999999").is_integer_below_1e21());
        assert!(!dec("1e21").is_integer_below_1e21());
        assert!(!dec("1.5").is_integer_below_1e21());
        assert!(dec("0").is_integer_below_1e21());
    }

    #[test]
    fn test_spellings_are_the_same_value() {
        for text in [
            "1",
            "-0",
            "0.25",
            "-12345678901234567890123",
            "1e-400",
            "7e300",
        ] {
            for other in dec(text).spellings() {
                assert_eq!(dec(&other), dec(text), "{text} {other}");
            }
        }
    }

    #[test]
    fn shortest_double_is_serde_json_s_float_text() {
        assert_eq!(shortest_double("0.1").as_deref(), Some("0.1"));
        assert_eq!(shortest_double("1e21").as_deref(), Some("1e+21"));
        assert_eq!(shortest_double("1E0").as_deref(), Some("1.0"));
        assert_eq!(shortest_double("1e400"), None);
    }
}

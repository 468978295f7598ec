//! Durations (`"500ms"`, `"30s"`, `"5m"`, `"24h"`, `"7d"`) and sizes (`"64KiB"`,
//! `"1MB"`, `512` bytes): parsing, and printing durations back the same way.
//!
//! The file model keeps the raw input (string or number) so a wrong type is a
//! collected, located error with a hint rather than serde's first-and-only one.

use std::fmt;
use std::time::Duration;

use crate::config::quoted;
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// Durations beyond this are refused: deadlines computed as `now + d` must never
/// overflow, and nobody means a lease of a century.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

const DURATION_UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

const SIZE_UNITS: [(&str, u64); 9] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// A duration as written: only `Text` can be valid.
#[derive(Debug, Clone, PartialEq)]
pub enum DurationInput {
    Text(String),
    /// A bare number, kept as written for the message.
    Number(String),
}

/// A size as written: a string with a unit or an integer of bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeInput {
    Text(String),
    Bytes(i64),
    /// A float, kept as written for the message.
    Float(String),
}

pub fn parse_duration_input(input: &DurationInput) -> Result<Duration, String> {
    match input {
        DurationInput::Text(text) => parse_duration(text),
        DurationInput::Number(number) => Err(format!(
            "a duration is a string with a unit, e.g. \"{number}s\" or \"{number}ms\", not the bare number {number}"
        )),
    }
}

pub fn parse_size_input(input: &SizeInput) -> Result<u64, String> {
    match input {
        SizeInput::Text(text) => parse_size(text),
        SizeInput::Bytes(bytes) => {
            u64::try_from(*bytes).map_err(|_| format!("a size cannot be negative (got {bytes})"))
        }
        SizeInput::Float(number) => Err(format!(
            "a size is a whole number of bytes or a string such as \"64KiB\", not {number}"
        )),
    }
}

/// Parses `<digits><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const HINT: &str = "expected a whole number and a unit (ms, s, m, h, d), e.g. \"30s\"";
    let invalid = || match near_miss(text, &DURATION_UNITS, "s").or_else(|| compound(text)) {
        Some(instead) => format!("invalid duration {}: {instead}", quoted(text)),
        None => format!("invalid duration {}: {HINT}", quoted(text)),
    };
    let (number, unit) = split_number(text).ok_or_else(invalid)?;
    if unit.starts_with('.') {
        return Err(format!(
            "invalid duration {}: decimals are not supported, use a smaller unit (\"90m\", not \"1.5h\")",
            quoted(text)
        ));
    }
    let scale = DURATION_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, scale)| *scale)
        .ok_or_else(invalid)?;
    let millis = number
        .checked_mul(scale)
        .map(Duration::from_millis)
        .filter(|d| *d <= MAX_DURATION)
        .ok_or_else(|| format!("duration {} is too large (at most 36500d)", quoted(text)))?;
    Ok(millis)
}

/// Parses `<digits><unit>` with a binary (`KiB`) or decimal (`KB`) unit, or `B`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    const HINT: &str = "expected a whole number and a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. \"64KiB\"";
    let invalid = || match near_miss(text, &SIZE_UNITS, "B") {
        Some(instead) => format!("invalid size {}: {instead}", quoted(text)),
        None => format!("invalid size {}: {HINT}", quoted(text)),
    };
    let (number, unit) = split_number(text).ok_or_else(invalid)?;
    let scale = SIZE_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, scale)| *scale)
        .ok_or_else(invalid)?;
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("size {} is too large", quoted(text)))
}

/// What to write instead of a value that misses by its unit alone: none,
/// a space before it, or the wrong case (units are case-sensitive: `m` is
/// minutes, `MB` megabytes); or by spaces around a right one.
fn near_miss(text: &str, units: &[(&str, u64)], usual: &str) -> Option<String> {
    let trimmed = text.trim();
    if trimmed != text && !trimmed.is_empty() {
        let right = split_number(trimmed)
            .is_some_and(|(_, unit)| units.iter().any(|(name, _)| *name == unit));
        if right {
            return Some(format!(
                "no space before or after the value: {}",
                quoted(trimmed)
            ));
        }
    }
    let text = trimmed;
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return None;
    }
    if unit.is_empty() {
        return Some(format!(
            "no unit: write {}",
            quoted(&format!("{number}{usual}"))
        ));
    }
    let exact = units.iter().find(|(name, _)| *name == unit.trim_start());
    if let Some((name, _)) = exact.filter(|_| unit.starts_with(' ')) {
        return Some(format!(
            "no space between the number and the unit: {}",
            quoted(&format!("{number}{name}"))
        ));
    }
    let folded = units
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit.trim_start()));
    folded.map(|(name, _)| {
        let instead = format!("{number}{name}");
        format!("units are case-sensitive: {}", quoted(&instead))
    })
}

/// `"1h30m"`: several numbers and units, which are not read; the one
/// duration they add up to is what to write.
fn compound(text: &str) -> Option<String> {
    let mut rest = text;
    let (mut millis, mut parts) = (0u64, 0);
    while !rest.is_empty() {
        let (number, tail) = split_number(rest)?;
        let letters = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(letters);
        let (_, scale) = DURATION_UNITS.iter().find(|(name, _)| *name == unit)?;
        millis = millis.checked_add(number.checked_mul(*scale)?)?;
        (rest, parts) = (tail, parts + 1);
    }
    (parts > 1).then(|| {
        let total = format_duration(Duration::from_millis(millis));
        format!("one number and one unit: \"{total}\"")
    })
}

/// Splits leading ASCII digits (at least one, fitting u64) from the rest.
fn split_number(text: &str) -> Option<(u64, &str)> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (number, unit) = text.split_at(digits);
    // Too many digits for u64 is reported as "too large" via a saturated value.
    let number = number.parse::<u64>().unwrap_or(u64::MAX);
    Some((number, unit))
}

/// Prints a duration in the largest unit that represents it exactly ("24h", "90s").
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{duration:?}");
    }
    // Days only from a week up and minutes from two, so "24h", "72h" and "60s"
    // read back as they are usually written.
    let (unit, scale) = DURATION_UNITS
        .iter()
        .rev()
        .filter(|(unit, _)| match *unit {
            "d" => millis >= 7 * 86_400_000,
            "m" => millis >= 120_000,
            _ => true,
        })
        .find(|(_, scale)| millis.is_multiple_of(u128::from(*scale)))
        .copied()
        .unwrap_or(("ms", 1));
    format!("{}{unit}", millis / u128::from(scale))
}

impl<'de> Deserialize<'de> for DurationInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

impl<'de> Deserialize<'de> for SizeInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SizeVisitor)
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = DurationInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string such as \"30s\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(DurationInput::Text(v.to_owned()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(DurationInput::Number(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(DurationInput::Number(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(DurationInput::Number(v.to_string()))
    }
}

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = SizeInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size: an integer of bytes or a string such as \"64KiB\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(SizeInput::Text(v.to_owned()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(SizeInput::Bytes(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(SizeInput::Bytes(i64::try_from(v).unwrap_or(i64::MAX)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(SizeInput::Float(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_rejected() {
        for bad in [
            "", "10", "-1s", "s", "10 s", " 10s", "10S", "10sec", "1h30m", "10us",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        let decimal = parse_duration("1.5h").unwrap_err();
        assert!(decimal.contains("decimals"), "{decimal}");
    }

    /// A near miss is told what to write instead.
    #[test]
    fn near_misses_say_what_to_write() {
        for (bad, hint) in [
            ("10", "no unit: write \"10s\""),
            ("10 s", "no space between the number and the unit: \"10s\""),
            ("10S", "units are case-sensitive: \"10s\""),
            ("5MS", "units are case-sensitive: \"5ms\""),
            ("1h30m", "one number and one unit: \"90m\""),
            ("1m30s", "one number and one unit: \"90s\""),
            ("2d12h", "one number and one unit: \"60h\""),
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains(hint), "{bad:?}: {err}");
        }
        for (bad, hint) in [
            ("64kib", "units are case-sensitive: \"64KiB\""),
            ("1mb", "units are case-sensitive: \"1MB\""),
            (
                "1 MiB",
                "no space between the number and the unit: \"1MiB\"",
            ),
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains(hint), "{bad:?}: {err}");
        }
        // Spaces around a right value are what is wrong, not the case.
        for (bad, hint) in [
            (" 1MiB", "no space before or after the value: \"1MiB\""),
            ("1KB ", "no space before or after the value: \"1KB\""),
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains(hint), "{bad:?}: {err}");
            assert!(!err.contains("case"), "{bad:?}: {err}");
        }
        let err = parse_duration("30s ").unwrap_err();
        assert!(
            err.contains("no space before or after the value: \"30s\""),
            "{err}"
        );
        // Anything else keeps the general hint.
        let err = parse_duration("10sec").unwrap_err();
        assert!(err.contains("expected a whole number and a unit"), "{err}");
    }

    /// What to write instead is quoted as the value is: shortened when long.
    #[test]
    fn a_long_near_miss_is_quoted_shortened() {
        let digits = "9".repeat(1000);
        let shown = format!("\"{}\"… (1001 bytes)", "9".repeat(64));
        for (bad, hint) in [
            (digits.clone(), format!("no unit: write {shown}")),
            (
                format!("{digits} s"),
                format!("no space between the number and the unit: {shown}"),
            ),
            (
                format!("{digits}S"),
                format!("units are case-sensitive: {shown}"),
            ),
        ] {
            let err = parse_duration(&bad).unwrap_err();
            assert!(err.ends_with(&hint), "{err}");
            assert!(err.len() < 300, "{err}");
        }
    }

    #[test]
    fn duration_overflow_is_an_error() {
        assert!(
            parse_duration("99999999999999999999999s")
                .unwrap_err()
                .contains("too large")
        );
        assert!(
            parse_duration("18446744073709551615d")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_duration("36501d").unwrap_err().contains("too large"));
        assert!(parse_duration("36500d").is_ok());
    }

    #[test]
    fn bare_number_duration_gets_a_hint() {
        let err = parse_duration_input(&DurationInput::Number("10".into())).unwrap_err();
        assert!(err.contains("\"10s\""), "{err}");
    }

    #[test]
    fn sizes_binary_decimal_and_bytes() {
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size("1GiB"), Ok(1_073_741_824));
        assert_eq!(parse_size("2KB"), Ok(2_000));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size_input(&SizeInput::Bytes(4096)), Ok(4096));
    }

    #[test]
    fn sizes_rejected() {
        for bad in [
            "", "64", "64kib", "1.5MiB", "-1KiB", "KiB", "1 MiB", "1MiBs",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(
            parse_size("99999999999TiB")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_size_input(&SizeInput::Bytes(-1)).is_err());
        assert!(parse_size_input(&SizeInput::Float("1.5".into())).is_err());
    }

    #[test]
    fn durations_print_back_in_the_largest_exact_unit() {
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(60)), "60s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(format_duration(Duration::from_secs(72 * 3_600)), "72h");
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(format_duration(Duration::from_secs(8 * 86_400)), "8d");
        assert_eq!(format_duration(Duration::from_secs(25 * 3_600)), "25h");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_millis(1_500)), "1500ms");
    }
}

//! Canonical JSON for fingerprints: two bodies that mean the same JSON value
//! serialize to the same bytes, and two that do not, never do.
//!
//! Close to RFC 8785 (JCS), simplified:
//! - objects: keys sorted by their UTF-8 bytes (JCS sorts by UTF-16 code units;
//!   the two orders differ only for characters above U+FFFF vs U+E000..U+FFFF);
//! - no insignificant whitespace;
//! - strings: `"` and `\` escaped, `\b \t \n \f \r` by their short escape,
//!   other control characters as `\u00xx`, everything else as raw UTF-8 (so
//!   `"\u0041"` and `"A"` are equal);
//! - numbers by their exact decimal value, never rounded to a double (so
//!   `12345678901234567890123` and `...124` differ, and so do `0.1` and
//!   `0.1000000000000000001`; `1`, `1.0`, `10e-1` are equal, `-0` is `0`):
//!   1. an integer below 1e21 in magnitude as its digits (as in JCS);
//!   2. else, when the double nearest the number, printed shortest (serde_json's
//!      float text, e.g. `0.1`, `1.5e+300`), spells the number's exact value:
//!      that text;
//!   3. else `d.ddde±x` with every significant digit (`1.000000000000000001e-1`).
//!
//!   Rules 1 and 2 keep the fingerprints earlier versions stored, which read
//!   numbers as doubles; why rule 3 cannot collide with any of them is in
//!   docs/adr/0009-canonical-json-numbers.md.
//!
//! A body this module will not vouch for gets no canonical form, and the
//! fingerprint hashes its bytes, as for a body that is not JSON at all (a false
//! "different", a 422, is safe; a false "same" would replay another request's
//! answer):
//! - an object with a member name twice, at any depth: `{"a":1,"a":2}` must not
//!   equal `{"a":2}`, yet which member "wins" is up to each reader;
//! - a number out of a double's range (`1e400`): earlier versions' serde_json
//!   refused such a body, so its fingerprint stays the bytes' one;
//!   likewise a non-zero number with an exponent of 10^18 or more;
//! - an object whose member name is serde_json's private number marker (see
//!   `NUMBER_TOKEN` below).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::io::Write;

use super::json_number::{Decimal, shortest_double};

/// The canonical form of a JSON body, or `None`: not JSON, or JSON with no
/// canonical form here (a duplicate member name, a number out of a double's
/// range; see the module docs). The fingerprint hashes the raw bytes then.
///
/// serde_json's recursion limit (128) bounds the depth of the parsed document,
/// and so the recursion of the canonicalization.
pub fn canonical(body: &[u8]) -> Option<Vec<u8>> {
    let doc: Json = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(body.len());
    write(&doc, &mut out).ok()?;
    Some(out)
}

/// A body the canonical form is refused for.
struct NoCanonicalForm;

/// A JSON document as read for canonicalization: numbers exact, object
/// members in document order with duplicates kept. (serde_json's `Value`
/// keeps only the last of duplicate members, and reads an object
/// `{NUMBER_TOKEN: "1"}` as the number 1.)
enum Json {
    Null,
    Bool(bool),
    /// serde_json hands over integers that fit `u64` or `i64` as such.
    Unsigned(u64),
    Signed(i64),
    /// Any other number, as written (serde_json's `arbitrary_precision`).
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
    /// A value `fingerprint_body.exclude` names, left in its place and
    /// skipped by the array or object that holds it when written: each
    /// pointer then names a place in the body as sent (removed at once,
    /// `/items/0` would shift `/items/2` to where `/items/1` points).
    Excluded,
}

/// The member name under which serde_json's `arbitrary_precision` hands a
/// number's text to a visitor: a one-member map `{NUMBER_TOKEN: "12.5"}`
/// (serde_json's own `Value` is built the same way). Private to serde_json;
/// the number tests below fail if a release renames it.
///
/// A document's own object with that member name is told apart by how the
/// member's value comes: serde_json passes a number's text as an owned
/// `String` (`visit_string`), and a document's strings by reference
/// (`visit_str`, `visit_borrowed_str`). [`NumberText`] takes only the first,
/// so such a document is refused (hashed by bytes) rather than read, as
/// `Value` would read it, as the number `12.5`.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Unsigned(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Signed(n))
    }

    // No visit_f64: with `arbitrary_precision` serde_json never rounds a number
    // to a double; were it to, the default refuses the body rather than
    // compare numbers inexactly.

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Ok(Json::Object(Vec::new()));
        };
        if first == NUMBER_TOKEN {
            let NumberText(text) = map.next_value()?;
            return Ok(Json::Number(text));
        }
        let mut members = vec![(first, map.next_value()?)];
        while let Some(member) = map.next_entry()? {
            members.push(member);
        }
        Ok(Json::Object(members))
    }
}

/// The text of a number, as serde_json's `arbitrary_precision` passes it (see
/// [`NUMBER_TOKEN`]).
struct NumberText(String);

impl<'de> Deserialize<'de> for NumberText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = NumberText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number's text from serde_json")
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<NumberText, E> {
                Ok(NumberText(s))
            }
            // A string of the document (visit_borrowed_str comes here too):
            // refused, see NUMBER_TOKEN.
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NumberText, E> {
                Err(E::invalid_type(de::Unexpected::Str(s), &self))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

fn write(value: &Json, out: &mut Vec<u8>) -> Result<(), NoCanonicalForm> {
    // Writes into a Vec cannot fail; their results are ignored for that reason.
    match value {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(true) => out.extend_from_slice(b"true"),
        Json::Bool(false) => out.extend_from_slice(b"false"),
        Json::Unsigned(n) => {
            let _ = write!(out, "{n}");
        }
        Json::Signed(n) => {
            let _ = write!(out, "{n}");
        }
        Json::Number(text) => number(text, out)?,
        Json::String(s) => string(s, out),
        Json::Array(items) => {
            out.push(b'[');
            let kept = items.iter().filter(|item| !matches!(item, Json::Excluded));
            for (i, item) in kept.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out)?;
            }
            out.push(b']');
        }
        Json::Object(members) => {
            let mut sorted: Vec<&(String, Json)> = members
                .iter()
                .filter(|(_, member)| !matches!(member, Json::Excluded))
                .collect();
            sorted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            // Sorted, a duplicate name is next to its twin.
            if sorted.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return Err(NoCanonicalForm);
            }
            out.push(b'{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(name, out);
                out.push(b':');
                write(member, out)?;
            }
            out.push(b'}');
        }
        // Only ever inside an array or object, which skip it.
        Json::Excluded => {}
    }
    Ok(())
}

/// A number that is not a `u64`/`i64`, by the rules of the module docs.
fn number(text: &str, out: &mut Vec<u8>) -> Result<(), NoCanonicalForm> {
    let value = Decimal::parse(text).ok_or(NoCanonicalForm)?;
    if value.is_integer_below_1e21() {
        value.write_integer(out);
        return Ok(());
    }
    // None: the nearest double is infinite (see the module docs).
    let shortest = shortest_double(text).ok_or(NoCanonicalForm)?;
    if Decimal::parse(&shortest).as_ref() == Some(&value) {
        out.extend_from_slice(shortest.as_bytes());
    } else {
        value.write_scientific(out);
    }
    Ok(())
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

/// Which members of a JSON body the fingerprint looks at (`fingerprint_body`).
/// Pointers are given as their unescaped tokens ([`super::pointer::tokens`]).
#[derive(Debug, Clone, Copy)]
pub enum Filter<'a> {
    /// The document without the values at these pointers.
    Exclude(&'a [Vec<String>]),
    /// Only the values at these pointers, in configured order.
    Include(&'a [Vec<String>]),
}

/// The canonical form of a JSON body seen through `filter`, or `None` (not
/// JSON, or no canonical form: see [`canonical`]).
///
/// `Include` writes a JSON array with one entry per pointer: `[value]` when
/// the pointer finds a value, `[]` when it does not, so an absent member never
/// equals one that is `null`.
pub fn canonical_filtered(body: &[u8], filter: Filter<'_>) -> Option<Vec<u8>> {
    let mut doc: Json = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(body.len());
    match filter {
        Filter::Exclude(pointers) => {
            for tokens in pointers {
                remove(&mut doc, tokens);
            }
            write(&doc, &mut out).ok()?;
        }
        Filter::Include(pointers) => {
            out.push(b'[');
            for (i, tokens) in pointers.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'[');
                if let Some(value) = find(&doc, tokens).ok()? {
                    write(value, &mut out).ok()?;
                }
                out.push(b']');
            }
            out.push(b']');
        }
    }
    Some(out)
}

/// The value at a pointer (RFC 6901: an array index is digits without a
/// leading zero), `Ok(None)` when there is none. A name twice in an object
/// on the way is `Err`: which twin counts is up to each reader (the upstream
/// may take the last), so the body has no canonical form, as for
/// [`canonical`]; taken as absent, `{"amount":1,"amount":2}` would equal a
/// body without an amount.
fn find<'d>(doc: &'d Json, tokens: &[String]) -> Result<Option<&'d Json>, NoCanonicalForm> {
    let mut at = doc;
    for token in tokens {
        let next = match at {
            Json::Object(members) => {
                let mut named = members.iter().filter(|(name, _)| name == token);
                let found = named.next().map(|(_, value)| value);
                if named.next().is_some() {
                    return Err(NoCanonicalForm);
                }
                found
            }
            Json::Array(items) => array_index(token).and_then(|i| items.get(i)),
            _ => None,
        };
        let Some(next) = next else {
            return Ok(None);
        };
        at = next;
    }
    Ok(Some(at))
}

/// Marks the value at a pointer, if there is one, as excluded: an object's
/// member (all members of that name), or an array's element. Pointers into
/// an excluded value find nothing.
fn remove(doc: &mut Json, tokens: &[String]) {
    let Some((last, path)) = tokens.split_last() else {
        // `""` names the whole document: nothing is left of it.
        *doc = Json::Null;
        return;
    };
    let mut at = doc;
    for token in path {
        at = match at {
            Json::Object(members) => match members.iter_mut().find(|(name, _)| name == token) {
                Some((_, value)) => value,
                None => return,
            },
            Json::Array(items) => match array_index(token).and_then(|i| items.get_mut(i)) {
                Some(value) => value,
                None => return,
            },
            _ => return,
        };
    }
    match at {
        Json::Object(members) => {
            for (_, member) in members.iter_mut().filter(|(name, _)| name == last) {
                *member = Json::Excluded;
            }
        }
        Json::Array(items) => {
            if let Some(item) = array_index(last).and_then(|i| items.get_mut(i)) {
                *item = Json::Excluded;
            }
        }
        _ => {}
    }
}

fn array_index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::json_number::OLD_FORMS;
    use proptest::prelude::*;
    use serde_json::Number;

    fn canon(json: &str) -> String {
        let out = canonical(json.as_bytes()).unwrap_or_else(|| panic!("no canonical form: {json}"));
        String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"))
    }

    fn canon_opt(json: &str) -> Option<String> {
        canonical(json.as_bytes()).map(|out| String::from_utf8(out).unwrap_or_default())
    }

    /// The canonical number of this module before numbers were exact (it read
    /// them as serde_json's `Value` without `arbitrary_precision`: a `u64` or
    /// `i64` if the text is an integer that fits, else the nearest `f64`),
    /// `None` for a body serde_json refused. Checked against [`OLD_FORMS`].
    fn old_number(text: &str) -> Option<String> {
        if !text.contains(['.', 'e', 'E']) && text != "-0" {
            if let Ok(u) = text.parse::<u64>() {
                return Some(u.to_string());
            }
            if let Ok(i) = text.parse::<i64>() {
                return Some(i.to_string());
            }
        }
        let f: f64 = text.parse().ok()?;
        if !f.is_finite() {
            return None;
        }
        if f.fract() == 0.0 && f.abs() < 1e21 {
            Some((f as i128).to_string())
        } else {
            Number::from_f64(f).map(|n| n.to_string())
        }
    }

    /// The entries of [`OLD_FORMS`] whose old form did not spell the number exactly,
    /// with their new form. Every other entry must be unchanged.
    const CHANGED: &[(&str, Option<&str>)] = &[
        ("12345678901234567.0", Some("12345678901234567")),
        ("18446744073709551615.0", Some("18446744073709551615")),
        ("-9223372036854775809", Some("-9223372036854775809")),
        ("99999999999999999999", Some("99999999999999999999")),
        ("999999999999999999999", Some("999999999999999999999")),
        (
            "12345678901234567890123",
            Some("1.2345678901234567890123e+22"),
        ),
        (
            "12345678901234567890124",
            Some("1.2345678901234567890124e+22"),
        ),
        ("0.1000000000000000001", Some("1.000000000000000001e-1")),
        (
            "0.1000000000000000055511151231257827021181583404541015625",
            Some("1.000000000000000055511151231257827021181583404541015625e-1"),
        ),
        ("0.99999999999999999999", Some("9.9999999999999999999e-1")),
        ("1e-400", Some("1e-400")),
        ("-1e-400", Some("-1e-400")),
        // An exponent of 10^18 or more: refused (its old form is 0).
        ("1e-99999999999999999999", None),
    ];

    #[test]
    fn old_forms_that_were_exact_are_unchanged() {
        for &(input, today, _) in OLD_FORMS {
            assert_eq!(old_number(input).as_deref(), today, "reference, {input}");
            let want = CHANGED
                .iter()
                .find(|(changed, _)| *changed == input)
                .map_or(today, |&(_, new)| new);
            assert_eq!(canon_opt(input).as_deref(), want, "{input}");
            // Inside a document, too.
            let doc = format!(r#"{{"x":[{input}]}}"#);
            let want_doc = want.map(|n| format!(r#"{{"x":[{n}]}}"#));
            assert_eq!(canon_opt(&doc), want_doc, "{doc}");
        }
        for &(input, _) in CHANGED {
            assert!(
                OLD_FORMS.iter().any(|(i, _, _)| *i == input),
                "{input} not in OLD_FORMS"
            );
            let old = old_number(input);
            let value = Decimal::parse(input);
            // Changed only where the old form did not spell the number.
            assert_ne!(old.as_deref().and_then(Decimal::parse), value, "{input}");
        }
    }

    #[test]
    fn numbers_compare_by_exact_value() {
        for same in [
            &[
                "1", "1.0", "1.00", "1e0", "1E+0", "10e-1", "100E-2", "0.1e1",
            ][..],
            &["0", "-0", "0.0", "-0.0", "0e5", "-0E-5"],
            &["0.1", "0.10", "1e-1", "100e-3"],
            &[
                "12345678901234567890123",
                "1.2345678901234567890123e22",
                "12345678901234567890123.000",
            ],
            &["0.1000000000000000001", "1000000000000000001e-19"],
        ] {
            for text in same {
                assert_eq!(canon(text), canon(same[0]), "{text} vs {}", same[0]);
            }
        }
        for (a, b) in [
            ("12345678901234567890123", "12345678901234567890124"),
            ("0.1000000000000000001", "0.1"),
            ("1.2345678901234568e22", "12345678901234567890123"),
            ("18446744073709551615.0", "18446744073709551616"),
            ("-9223372036854775809", "-9223372036854775808"),
            ("9007199254740993", "9007199254740992"),
            ("9007199254740993.0", "9007199254740992"),
            ("0.99999999999999999999", "1"),
            ("1e-400", "0"),
            ("1", "-1"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} vs {b}");
        }
    }

    #[test]
    fn out_of_range_numbers_have_no_canonical_form() {
        // Earlier versions' serde_json refused these: still bytes.
        for text in [
            "1e400",
            "-1e400",
            "[1,{\"a\":1e309}]",
            &format!("1{}", "0".repeat(400)),
        ] {
            assert_eq!(canon_opt(text), None, "{text}");
        }
        assert_eq!(canon_opt("1e99999999999999999999"), None);
        assert_eq!(canon("0e99999999999999999999"), "0");
        assert_eq!(canon("1.7976931348623157e308"), "1.7976931348623157e+308");
    }

    #[test]
    fn duplicate_member_names_have_no_canonical_form() {
        for json in [
            r#"{"a":1,"a":2}"#,
            r#"{"a":1,"a":1}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"b":0,"a":1,"c":2,"a":3}"#,
            r#"[1,{"x":{"y":[{"k":null,"k":null}]}}]"#,
            r#"{"":1,"":2}"#,
        ] {
            assert_eq!(canon_opt(json), None, "{json}");
        }
        // The same name in different objects is no duplicate.
        assert_eq!(
            canon(r#"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#),
            r#"{"a":{"a":1},"b":[{"a":2},{"a":3}]}"#
        );
        assert_eq!(canon(r#"{"a":1,"A":2,"a ":3}"#), r#"{"A":2,"a":1,"a ":3}"#);
    }

    #[test]
    fn an_object_named_like_serde_json_s_number_marker_is_not_a_number() {
        // serde_json's Value reads these as the number 1; here they are refused.
        for json in [
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"\u0024serde_json::private::Number":"1"}"#,
            r#"{"$serde_json::private::Number":1}"#,
            r#"{"$serde_json::private::Number":"1","b":2}"#,
            r#"[{"$serde_json::private::Number":"1.5"}]"#,
        ] {
            assert_eq!(canon_opt(json), None, "{json}");
        }
        assert_eq!(
            canon(r#"{"$serde_json::private::Numbe":"1"}"#),
            r#"{"$serde_json::private::Numbe":"1"}"#
        );
    }

    fn literal() -> impl Strategy<Value = String> {
        prop_oneof![
            "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?",
            (
                any::<f64>().prop_filter("finite", |f| f.is_finite()),
                0u8..6,
                0usize..40
            )
                .prop_map(|(f, how, precision)| match how {
                    0 => Number::from_f64(f)
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    1 => format!("{f:e}"),
                    2 => format!("{f:E}"),
                    3 => format!("{f}"),
                    4 => format!("{f:.precision$e}"),
                    // Every digit of the double: its exact value.
                    _ => format!("{f:.800e}"),
                }),
            any::<i128>().prop_map(|i| i.to_string()),
            (any::<i64>(), 0usize..20).prop_map(|(n, scale)| {
                let digits = format!("{:0>width$}", n.unsigned_abs(), width = scale + 1);
                let (int, frac) = digits.split_at(digits.len() - scale);
                let sign = if n < 0 { "-" } else { "" };
                if frac.is_empty() {
                    format!("{sign}{int}")
                } else {
                    format!("{sign}{int}.{frac}")
                }
            }),
        ]
    }

    proptest! {
        /// Every number: canonical form exactly its value, the same for every
        /// spelling, the old form when the old form spelled the value, and
        /// otherwise, when written with an exponent, a text the old code never
        /// wrote (every old text is a fixed point of the old code).
        #[test]
        fn numbers_are_exact_and_keep_their_exact_old_forms(text in literal()) {
            let old = old_number(&text);
            let value = Decimal::parse(&text);
            let new = canon_opt(&text);
            prop_assert_eq!(new.is_none(), old.is_none() || value.is_none(), "{}", text);
            if let (Some(new), Some(value)) = (new, value) {
                prop_assert_eq!(Decimal::parse(&new), Some(value.clone()), "{} -> {}", text, new);
                if old.as_deref().and_then(Decimal::parse).as_ref() == Some(&value) {
                    prop_assert_eq!(Some(&new), old.as_ref(), "{}", text);
                } else if new.contains('e') {
                    // (An integer's digits may be an old text: of this very
                    // value, or of a number the old code rounded to it.)
                    prop_assert_ne!(old_number(&new), Some(new.clone()), "{}", text);
                }
                prop_assert_eq!(canon(&new), new.clone(), "{}", text);
                for other in value.spellings() {
                    prop_assert_eq!(canon(&other), new.clone(), "{} vs {}", text, other);
                }
            }
        }
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
        // Without serde_json's `float_roundtrip` its fast float parser is off
        // by an ULP for some spellings, and one value written two ways would
        // get two fingerprints (a false 422; tests/fuzz.rs).
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
    fn output_is_a_fixed_point() {
        let json = r#"{"k":[1,-2,3.25,1e300,1e-400,"x\ny",{"\u0000":null}],"e":""}"#;
        let out = canon(json);
        assert_eq!(
            out,
            r#"{"e":"","k":[1,-2,3.25,1e+300,1e-400,"x\ny",{"\u0000":null}]}"#
        );
        assert_eq!(canon(&out), out);
    }

    #[test]
    fn not_json_has_no_canonical_form() {
        for body in [
            "",
            "not json",
            "{\"a\":1} x",
            "[1,]",
            "{\"a\":\"\\ud800\"}",
            "01",
        ] {
            assert_eq!(canon_opt(body), None, "{body:?}");
        }
        assert_eq!(canonical(b"\"\xff\""), None);
    }
}

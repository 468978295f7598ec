//! Stable-toolchain "fuzz" targets: proptest properties over the parsers that
//! take untrusted input, each bounded in cases so CI runs them in seconds.
//! `PROPTEST_CASES=100000 cargo test --release --test fuzz` runs them longer.
//! (cargo-fuzz needs a nightly toolchain and a libFuzzer build; see
//! docs/testing.md for why this project fuzzes with proptest instead.)
//!
//! Targets:
//! - keys from header values (bare and RFC 8941 strings) on arbitrary bytes;
//! - keys at a JSON pointer on arbitrary bytes and on generated JSON;
//! - fingerprints with `canonical_json`: reordering and reformatting a JSON
//!   value never changes it, a different value always does;
//! - config parsing on arbitrary text and on mutations of the shipped config;
//! - multipart fingerprints: the boundary and framing never matter, a
//!   changed part always does (fuzz/multipart.rs).

use std::path::Path;

#[path = "fuzz/multipart.rs"]
mod multipart;

use idemgate::config::FingerprintPart;
use idemgate::key::{self, FingerprintInput, KeyError};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value};

fn config(cases: u32) -> Config {
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

fn is_valid_key(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| (0x21..=0x7E).contains(&b))
}

/// Bytes biased toward what the key and JSON parsers branch on.
fn hostile_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => any::<u8>(),
        4 => prop::sample::select(b"\"\\ \t{}[]:,/~01-.eEu\x00\x7f\x80\xffaz!~".to_vec()),
    ];
    prop::collection::vec(byte, 0..max)
}

/// A valid key: 1–255 visible ASCII characters.
fn valid_key() -> impl Strategy<Value = String> {
    prop::collection::vec(0x21u8..=0x7E, 1..=255)
        .prop_map(|bytes| bytes.into_iter().map(char::from).collect())
}

/// The RFC 8941 sf-string of `key`, with optional whitespace around it.
fn quoted(key: &str, lead: &str, trail: &str) -> Vec<u8> {
    let mut out = lead.as_bytes().to_vec();
    out.push(b'"');
    for b in key.bytes() {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
    out.extend_from_slice(trail.as_bytes());
    out
}

fn ows() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", " ", "\t", "  \t"]).prop_map(str::to_owned)
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn header_key_never_panics_and_ok_is_valid(value in prop_oneof![
        hostile_bytes(300),
        prop::collection::vec(any::<u8>(), 250..600),
    ]) {
        // A quoted (RFC 8941) key may also hold spaces.
        if let Ok(key) = key::from_header_value(&value) {
            prop_assert!(
                (1..=255).contains(&key.len()) && key.bytes().all(|b| (0x20..=0x7E).contains(&b)),
                "accepted {key:?} from {value:?}"
            );
        }
    }

    #[test]
    fn quoted_key_is_the_key(key in valid_key(), lead in ows(), trail in ows()) {
        let value = quoted(&key, &lead, &trail);
        prop_assert_eq!(key::from_header_value(&value), Ok(key.clone()));
        if !key.starts_with('"') {
            let bare = format!("{lead}{key}{trail}");
            prop_assert_eq!(key::from_header_value(bare.as_bytes()), Ok(key));
        }
    }

    #[test]
    fn overlong_or_empty_quoted_keys_are_invalid(
        key in prop::collection::vec(0x21u8..=0x7E, 256..400),
    ) {
        let key: String = key.into_iter().map(char::from).collect();
        prop_assert!(matches!(
            key::from_header_value(&quoted(&key, "", "")),
            Err(KeyError::Invalid(_))
        ));
        prop_assert!(matches!(key::from_header_value(b"\"\""), Err(KeyError::Invalid(_))));
    }

    #[test]
    fn json_pointer_never_panics(
        body in prop_oneof![hostile_bytes(200), any::<String>().prop_map(String::into_bytes)],
        pointer in prop_oneof![
            prop::sample::select(vec!["", "/", "/id", "/0", "/a/0", "/~1", "/~0", "/~", "/~2", "id"])
                .prop_map(str::to_owned),
            "(/[a-z0-9~]{0,3}){0,4}",
            any::<String>(),
        ],
    ) {
        if let Ok(key) = key::from_json_body(&body, &pointer) {
            prop_assert!(is_valid_key(&key));
        }
    }

    #[test]
    fn json_pointer_finds_the_planted_key(
        doc in json_value(),
        path in prop::collection::vec(segment(), 1..5),
        planted in prop_oneof![
            valid_key().prop_map(Value::String),
            any::<i64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            Just(Value::Null),
            Just(Value::Bool(true)),
        ],
        seed in any::<u64>(),
    ) {
        let (doc, pointer) = plant(doc, &path, planted.clone());
        // A number key is its JSON text as parsed, so numbers keep one spelling.
        let body = if planted.is_number() {
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        } else {
            render(&doc, &mut Rng(seed | 1))
        };
        let got = key::from_json_body(body.as_bytes(), &pointer);
        let expected = match &planted {
            Value::String(s) if is_valid_key(s) => Ok(s.clone()),
            Value::String(_) => Err("invalid"),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err("missing"),
        };
        match (expected, got) {
            (Ok(want), Ok(got)) => prop_assert_eq!(want, got),
            (Err("invalid"), Err(KeyError::Invalid(_))) => {}
            (Err("missing"), Err(KeyError::Missing)) => {}
            (want, got) => prop_assert!(false, "{pointer} in {body}: want {want:?}, got {got:?}"),
        }
    }

    #[test]
    fn deep_nesting_is_missing_not_a_crash(depth in 100usize..20_000, object in any::<bool>()) {
        let body = if object {
            format!("{}\"k\"{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
        } else {
            format!("{}\"k\"{}", "[".repeat(depth), "]".repeat(depth))
        };
        let pointer = if object { "/a".repeat(depth) } else { "/0".repeat(depth) };
        let got = key::from_json_body(body.as_bytes(), &pointer);
        prop_assert!(got.is_ok() || got == Err(KeyError::Missing));
        // The fingerprint reads the same body.
        let _ = fingerprint(body.as_bytes(), true);
    }

    #[test]
    fn canonical_fingerprint_ignores_order_and_format(
        value in json_value(),
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        let first = render(&value, &mut Rng(a | 1));
        let second = render(&value, &mut Rng(b | 1));
        let reparsed: Value = serde_json::from_str(&first)
            .map_err(|e| TestCaseError::fail(format!("{e}: {first}")))?;
        prop_assert!(same_value(&value, &reparsed), "{first} is not {value}");
        prop_assert_eq!(
            fingerprint(first.as_bytes(), true),
            fingerprint(second.as_bytes(), true),
            "{} vs {}", first, second
        );
    }

    #[test]
    fn canonical_fingerprint_tells_values_apart(
        value in json_value(),
        other in prop_oneof![json_value().boxed(), Just(Value::Null).boxed()],
        mutate in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let other = if mutate { mutated(&value, seed) } else { other };
        let mut rng = Rng(seed | 1);
        let (x, y) = (render(&value, &mut rng), render(&other, &mut rng));
        let same = fingerprint(x.as_bytes(), true) == fingerprint(y.as_bytes(), true);
        prop_assert_eq!(same, same_value(&value, &other), "{} vs {}", x, y);
    }

    #[test]
    fn non_json_bodies_hash_by_bytes(body in hostile_bytes(100)) {
        if serde_json::from_slice::<Value>(&body).is_err() {
            prop_assert_eq!(fingerprint(&body, true), fingerprint(&body, false));
        }
    }
}

// ---- config -------------------------------------------------------------

const SHIPPED: &str = include_str!("../config/idemgate.toml");

fn check_config(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new("fuzz/idemgate.toml");
    match idemgate::config::parse(text, path, &|_| None) {
        Ok(config) => {
            let _ = idemgate::config::describe(&config);
        }
        Err(errors) => {
            prop_assert!(!errors.0.is_empty(), "an empty error list");
            let lines = text.lines().count().max(1) + 1;
            for error in &errors.0 {
                prop_assert_eq!(&error.file, path);
                prop_assert!(!error.message.trim().is_empty(), "no message: {:?}", error);
                if let Some(line) = error.line {
                    prop_assert!(
                        (1..=lines).contains(&line),
                        "line {} of {}: {:?}",
                        line,
                        lines,
                        error
                    );
                }
                prop_assert!(!error.to_string().is_empty());
            }
        }
    }
    Ok(())
}

/// Values a mutation plants in the config: wrong types, edge numbers, units.
const PLANTS: &[&str] = &[
    "\"\"",
    "\"x\"",
    "0",
    "-1",
    "1.5",
    "true",
    "[]",
    "{}",
    "[1, \"a\"]",
    "{ x = 1 }",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "1e400",
    "\"0s\"",
    "\"1ms\"",
    "\"36501d\"",
    "\"99999999999999999999999d\"",
    "\"1.5h\"",
    "\"0B\"",
    "\"18446744073709551615TB\"",
    "\"99999999999999999999KiB\"",
    "\"é\"",
    "\"http://\"",
    "\"https://[::1]:0\"",
    "\"127.0.0.1:99999\"",
    "\"header:\"",
    "\"header:Authorization\"",
    "\"client_cert\"",
    "\"/\"",
    "\"\\u0000\"",
    "nan",
    "inf",
    "\"postgres\"",
    "\"redis://\"",
    "[\"\"]",
    "[600, 99]",
    "{ json_pointer = \"\" }",
    "{ header = \"\" }",
    "{ path = \"\" }",
    "{ path_prefix = \"x\" }",
    "\"wait\"",
    "1979-05-27T07:32:00Z",
    "'''\n'''",
    "\"\"\"\n\"\"\"",
];

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    /// Replace the value of the line's `key = value` with a planted one.
    Replace(usize, usize),
    Uncomment(usize),
    InsertBytes(usize, Vec<u8>),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        1 => at.prop_map(Mutation::DeleteLine),
        1 => at.prop_map(Mutation::DuplicateLine),
        1 => (at, at).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        5 => (at, 0..PLANTS.len()).prop_map(|(a, p)| Mutation::Replace(a, p)),
        2 => at.prop_map(Mutation::Uncomment),
        1 => (at, hostile_bytes(6)).prop_map(|(a, b)| Mutation::InsertBytes(a, b)),
        1 => at.prop_map(Mutation::Truncate),
    ]
}

fn apply(text: &str, mutation: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len().max(1);
    match mutation {
        Mutation::DeleteLine(i) => {
            if !lines.is_empty() {
                lines.remove(i % n);
            }
        }
        Mutation::DuplicateLine(i) => {
            if let Some(line) = lines.get(i % n).cloned() {
                lines.insert(i % n, line);
            }
        }
        Mutation::SwapLines(a, b) => {
            if !lines.is_empty() {
                lines.swap(a % n, b % n);
            }
        }
        Mutation::Replace(i, p) => {
            // Only lines with `key = value`; others pick the next such line.
            let assignments: Vec<usize> = (0..lines.len())
                .filter(|&j| !lines[j].trim_start().starts_with('#') && lines[j].contains('='))
                .collect();
            if !assignments.is_empty() {
                let j = assignments[i % assignments.len()];
                let key = lines[j].split('=').next().unwrap_or("").to_owned();
                lines[j] = format!("{key}= {}", PLANTS[*p]);
            }
        }
        Mutation::Uncomment(i) => {
            if let Some(line) = lines.get_mut(i % n)
                && let Some(rest) = line.trim_start().strip_prefix("# ")
            {
                *line = rest.to_owned();
            }
        }
        Mutation::InsertBytes(i, bytes) => {
            let mut text = lines.join("\n").into_bytes();
            let at = i % (text.len() + 1);
            text.splice(at..at, bytes.iter().copied());
            return String::from_utf8_lossy(&text).into_owned();
        }
        Mutation::Truncate(i) => {
            let text = lines.join("\n");
            let mut at = i % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            return text[..at].to_owned();
        }
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn config_parse_arbitrary_text(text in prop_oneof![
        any::<String>(),
        "(\\[[a-z.]{0,12}\\]\n)?([a-z_]{1,12} = (\"[0-9a-z:/.]{0,8}\"|[0-9-]{1,20}|true|\\[\\]|\\{\\})\n){0,6}",
    ]) {
        check_config(&text)?;
    }

    #[test]
    fn config_parse_mutated_shipped_config(mutations in prop::collection::vec(mutation(), 1..6)) {
        let text = mutations.iter().fold(SHIPPED.to_owned(), |text, m| apply(&text, m));
        check_config(&text)?;
    }
}

#[test]
fn shipped_config_is_valid() {
    assert!(idemgate::config::parse(SHIPPED, Path::new("config/idemgate.toml"), &|_| None).is_ok());
}

// ---- JSON generation -------------------------------------------------------

/// Integers small enough that every float spelling of them is exact.
const SAFE_INT: i64 = 1 << 49;

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,6}",
        any::<String>(),
        prop::collection::vec(
            prop::sample::select(vec![
                'a',
                '"',
                '\\',
                '/',
                '\n',
                '\u{0}',
                '\u{1f}',
                '\u{7f}',
                'é',
                '\u{2028}',
                '\u{fffd}',
                '😀',
                '\u{e000}',
                '\u{10ffff}'
            ]),
            0..8
        )
        .prop_map(|chars| chars.into_iter().collect()),
    ]
}

fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-SAFE_INT..SAFE_INT).prop_map(Value::from),
        // Finite floats with a fraction (integral floats are integers by value).
        any::<f64>()
            .prop_filter("finite, fractional", |f| f.is_finite() && f.fract() != 0.0)
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap_or_else(|| Number::from(0)))),
        (-1000i64..1000, 1u32..6).prop_map(|(n, d)| {
            let f = n as f64 + 1.0 / f64::from(1u32 << d);
            Value::Number(Number::from_f64(f).unwrap_or_else(|| Number::from(0)))
        }),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(json_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Segment {
    Field(String),
    Index(usize),
}

fn segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        prop_oneof!["[a-z]{0,3}", "[~/a]{1,3}", any::<String>()].prop_map(Segment::Field),
        (0usize..3).prop_map(Segment::Index),
    ]
}

/// Plants `leaf` at `path` in `doc` (replacing what is in the way); returns the
/// document and the RFC 6901 pointer to the leaf.
fn plant(doc: Value, path: &[Segment], leaf: Value) -> (Value, String) {
    fn go(doc: Value, path: &[Segment], leaf: Value, pointer: &mut String) -> Value {
        let Some((first, rest)) = path.split_first() else {
            return leaf;
        };
        match first {
            Segment::Field(name) => {
                pointer.push('/');
                pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
                let mut map = match doc {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                let child = map.remove(name).unwrap_or(Value::Null);
                map.insert(name.clone(), go(child, rest, leaf, pointer));
                Value::Object(map)
            }
            Segment::Index(i) => {
                pointer.push_str(&format!("/{i}"));
                let mut items = match doc {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                };
                while items.len() <= *i {
                    items.push(Value::Null);
                }
                let child = std::mem::take(&mut items[*i]);
                items[*i] = go(child, rest, leaf, pointer);
                Value::Array(items)
            }
        }
    }
    let mut pointer = String::new();
    let doc = go(doc, path, leaf, &mut pointer);
    (doc, pointer)
}

/// xorshift64: the formatting choices of one rendering.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn ws(rng: &mut Rng, out: &mut String) {
    for _ in 0..rng.pick(3) {
        out.push([' ', '\t', '\n', '\r'][rng.pick(4) as usize]);
    }
}

/// Serializes `value` with random whitespace, object key order, string
/// escapes and number spellings — always the same JSON value.
fn render(value: &Value, rng: &mut Rng) -> String {
    let mut out = String::new();
    ws(rng, &mut out);
    render_into(value, rng, &mut out);
    ws(rng, &mut out);
    out
}

fn render_into(value: &Value, rng: &mut Rng, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => render_number(n, rng, out),
        Value::String(s) => render_string(s, rng, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                render_into(item, rng, out);
                ws(rng, out);
            }
            ws(rng, out);
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // Fisher–Yates with the rendering's own choices.
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.pick(i as u64 + 1) as usize);
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                render_string(k, rng, out);
                ws(rng, out);
                out.push(':');
                ws(rng, out);
                render_into(v, rng, out);
                ws(rng, out);
            }
            out.push('}');
        }
    }
}

fn render_number(n: &Number, rng: &mut Rng, out: &mut String) {
    if let Some(i) = n.as_i64() {
        match rng.pick(5) {
            0 => out.push_str(&format!("{i}.0")),
            1 => out.push_str(&format!("{i}e0")),
            2 if i != 0 => out.push_str(&format!("{i}0E-1")),
            3 if i == 0 => out.push_str("-0.0"),
            _ => out.push_str(&i.to_string()),
        }
    } else if n.as_f64().is_some() {
        // Other spellings of the same decimal, made from its text. Not
        // `{f:e}`: the shortest digits of one double can be two decimals
        // (727888943311905.2 and 7.278889433119053e14), and canonical JSON
        // compares exact decimal values, so it rightly tells those apart.
        let text = n.to_string();
        let (mantissa, exponent) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m.to_owned(), e.parse::<i64>().expect("an exponent")),
            None => (text.clone(), 0),
        };
        match rng.pick(3) {
            0 => out.push_str(&format!("{mantissa}e{exponent}")),
            1 if mantissa.contains('.') => out.push_str(&format!("{mantissa}00E{exponent}")),
            1 => out.push_str(&format!("{mantissa}.0E{exponent}")),
            _ => out.push_str(&text),
        }
    } else {
        out.push_str(&n.to_string());
    }
}

fn render_string(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let escape = rng.pick(4) == 0;
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if escape => out.push_str("\\/"),
            '\n' if !escape => out.push_str("\\n"),
            c if (c as u32) < 0x20 || escape => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    if rng.pick(2) == 0 {
                        out.push_str(&format!("\\u{unit:04x}"));
                    } else {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Equality of JSON values by meaning: numbers by value.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// `value` with one leaf or member changed (which may, rarely, change nothing).
fn mutated(value: &Value, seed: u64) -> Value {
    let mut rng = Rng(seed | 1);
    let mut copy = value.clone();
    mutate_in(&mut copy, &mut rng);
    copy
}

fn mutate_in(value: &mut Value, rng: &mut Rng) {
    match value {
        Value::Array(items) if !items.is_empty() && rng.pick(3) != 0 => {
            let i = rng.pick(items.len() as u64) as usize;
            mutate_in(&mut items[i], rng);
        }
        Value::Object(map) if !map.is_empty() && rng.pick(3) != 0 => {
            let i = rng.pick(map.len() as u64) as usize;
            if let Some(child) = map.values_mut().nth(i) {
                mutate_in(child, rng);
            }
        }
        Value::Object(map) if rng.pick(2) == 0 => {
            map.insert(format!("new{}", rng.pick(3)), Value::Null);
        }
        Value::Number(n) => {
            *value = match n.as_i64() {
                Some(i) => Value::from(i ^ 1),
                None => Value::from(n.as_f64().unwrap_or(0.0) * 2.0 + 0.5),
            }
        }
        Value::String(s) => s.push('x'),
        Value::Bool(b) => *b = !*b,
        _ => *value = Value::Array(vec![]),
    }
}

fn fingerprint(body: &[u8], canonical_json: bool) -> String {
    let no_headers = |_: &str| None;
    let input = FingerprintInput {
        method: "POST",
        path: "/v1/charges",
        query: None,
        body,
        header: &no_headers,
    };
    key::fingerprint(&[FingerprintPart::Body], &input, canonical_json)
}

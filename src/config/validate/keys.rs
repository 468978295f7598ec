//! The key and fingerprint fields of a policy: key sources (one or a list),
//! `key_pattern`, `fingerprint_body`, `release_statuses` classes, and the
//! answer headers (`expiry_header`, `replay_headers`, `replay_values`). Each
//! yields the typed value the request path uses.

use http::{HeaderName, HeaderValue};
use toml::Spanned;

use super::context::Ctx;
use super::names;
use crate::config::file::{FingerprintBodyFile, KeyFile, KeyInput, StatusInput};
use crate::config::quoted;
use crate::config::{ReplayValues, StatusClass};
use crate::key::{Derive, DerivePart, FingerprintBody, KeyPattern, KeySource, Pointers};

/// `key`: `None` when absent or wrong (each error reported), so the inherited
/// sources stay.
pub fn sources(
    ctx: &mut Ctx<'_>,
    input: Option<&Spanned<KeyInput>>,
    field: &str,
) -> Option<Vec<KeySource>> {
    let input = input?;
    match input.get_ref() {
        KeyInput::One(file) => source(ctx, file, input.span(), field).map(|s| vec![s]),
        KeyInput::Alternatives(files) if files.is_empty() => {
            ctx.error(
                Some(input.span()),
                field,
                "empty: give at least one key source",
            );
            None
        }
        KeyInput::Alternatives(files) => {
            let mut ok = true;
            let mut sources: Vec<KeySource> = Vec::new();
            for (i, file) in files.iter().enumerate() {
                let item = format!("{field}[{i}]");
                match source(ctx, file.get_ref(), file.span(), &item) {
                    // A later alternative equal to an earlier one is never
                    // tried: a typo for the source meant.
                    Some(source) => match sources.iter().position(|s| *s == source) {
                        Some(first) => {
                            ok = false;
                            let case = match source {
                                KeySource::Header(_) => " (header names are case-insensitive)",
                                _ => "",
                            };
                            ctx.error(
                                Some(file.span()),
                                item,
                                format!(
                                    "the same source as {field}[{first}]{case}: listed twice, \
                                     it would never be tried"
                                ),
                            );
                        }
                        None => sources.push(source),
                    },
                    None => ok = false,
                }
            }
            ok.then_some(sources)
        }
    }
}

fn source(
    ctx: &mut Ctx<'_>,
    file: &KeyFile,
    span: std::ops::Range<usize>,
    field: &str,
) -> Option<KeySource> {
    let given = [
        file.header.is_some(),
        file.json_pointer.is_some(),
        file.query.is_some(),
        file.form_field.is_some(),
        file.derive.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        ctx.error(
            Some(span),
            field,
            "give exactly one of { header = \"...\" }, { json_pointer = \"/...\" }, \
             { query = \"...\" }, { form_field = \"...\" } or { derive = [...], namespace = \"...\" }",
        );
        return None;
    }
    if let (Some(namespace), None) = (&file.namespace, &file.derive) {
        ctx.error(
            Some(namespace.span()),
            format!("{field}.namespace"),
            "namespace belongs to a derive source",
        );
        return None;
    }
    let mut checked =
        |text: &Spanned<String>, name: &str, parse: &dyn Fn(&str) -> Result<KeySource, String>| {
            match parse(text.get_ref()) {
                Ok(source) => Some(source),
                Err(message) => {
                    ctx.error(Some(text.span()), format!("{field}.{name}"), message);
                    None
                }
            }
        };
    if let Some(header) = &file.header {
        return checked(header, "header", &|text| {
            names::header_name(text).map(KeySource::Header)
        });
    }
    if let Some(pointer) = &file.json_pointer {
        return checked(pointer, "json_pointer", &|text| {
            names::json_pointer(text).map(KeySource::JsonPointer)
        });
    }
    if let Some(query) = &file.query {
        return checked(query, "query", &|text| {
            parameter(text, QUERY).map(|()| KeySource::Query(text.to_owned()))
        });
    }
    if let Some(form_field) = &file.form_field {
        return checked(form_field, "form_field", &|text| {
            parameter(text, FORM).map(|()| KeySource::FormField(text.to_owned()))
        });
    }
    let parts = file.derive.as_ref()?;
    derive(ctx, parts, file.namespace.as_ref(), span, field).map(KeySource::Derive)
}

fn derive(
    ctx: &mut Ctx<'_>,
    parts: &Spanned<Vec<Spanned<String>>>,
    namespace: Option<&Spanned<String>>,
    span: std::ops::Range<usize>,
    field: &str,
) -> Option<Derive> {
    let mut ok = true;
    if parts.get_ref().is_empty() {
        ctx.error(
            Some(parts.span()),
            format!("{field}.derive"),
            "no parts: list the JSON pointers or \"header:\", \"query:\", \"form:\" parts the key is derived from",
        );
        ok = false;
    }
    let mut derived = Vec::new();
    for (i, part) in parts.get_ref().iter().enumerate() {
        let parsed = derive_part_length(part.get_ref()).and_then(|()| {
            DerivePart::parse(part.get_ref())
                .map_err(|error| format!("{} {error}", quoted(error.written())))
        });
        match parsed {
            Ok(parsed) if derived.contains(&parsed) => {
                ctx.error(
                    Some(part.span()),
                    format!("{field}.derive[{i}]"),
                    listed_twice(part.get_ref()),
                );
                ok = false;
            }
            Ok(parsed) => {
                if parsed == DerivePart::JsonPointer(String::new()) {
                    ctx.warn(
                        Some(part.span()),
                        format!("{field}.derive[{i}]"),
                        "\"\" is the whole body: it yields a key part only when the body \
                         is a bare JSON string or number; name a member (\"/id\")",
                    );
                }
                derived.push(parsed);
            }
            Err(message) => {
                ctx.error(Some(part.span()), format!("{field}.derive[{i}]"), message);
                ok = false;
            }
        }
    }
    let namespace = match namespace {
        None => {
            ctx.error(
                Some(span),
                format!("{field}.namespace"),
                "missing: a derive source needs namespace = \"<UUID>\"",
            );
            None
        }
        Some(text) => match uuid::Uuid::try_parse(text.get_ref()) {
            Ok(namespace) => Some(namespace),
            Err(_) => {
                ctx.error(
                    Some(text.span()),
                    format!("{field}.namespace"),
                    format!("{} is not a UUID", quoted(text.get_ref())),
                );
                None
            }
        },
    };
    match (ok, namespace) {
        (true, Some(namespace)) => Some(Derive {
            parts: derived,
            namespace,
        }),
        _ => None,
    }
}

const QUERY: &str = "the query parameter name";
const FORM: &str = "the form field name";

/// A query parameter's or form field's name (`what`) a key is read from.
fn parameter(text: &str, what: &str) -> Result<(), String> {
    names::at_most(text, what, names::PARAMETER_NAME_MAX_BYTES)?;
    if text.is_empty() {
        Err("empty: name the parameter or field".into())
    } else {
        Ok(())
    }
}

/// A derive part's name or pointer within its bound, checked before its
/// form: a refusal of its form says it whole.
fn derive_part_length(text: &str) -> Result<(), String> {
    let (name, what, max) = if let Some(name) = text.strip_prefix("header:") {
        (name, "the header name", names::HEADER_NAME_MAX_BYTES)
    } else if let Some(name) = text.strip_prefix("query:") {
        (name, QUERY, names::PARAMETER_NAME_MAX_BYTES)
    } else if let Some(name) = text.strip_prefix("form:") {
        (name, FORM, names::PARAMETER_NAME_MAX_BYTES)
    } else if text.starts_with('/') {
        (text, "the JSON pointer", names::JSON_POINTER_MAX_BYTES)
    } else {
        (text, "the derive part", names::JSON_POINTER_MAX_BYTES)
    };
    names::at_most(name, what, max)
}

/// `key_pattern`: `""` none, `"uuid"`, or a regex compiled here, once.
pub fn pattern(text: &str) -> Result<Option<KeyPattern>, String> {
    KeyPattern::parse(text).map_err(|error| format!("{} {error}", quoted(&error.text)))
}

/// `fingerprint_body`: `{}`, `{ exclude = [...] }` or `{ include = [...] }`.
pub fn fingerprint_body(
    ctx: &mut Ctx<'_>,
    input: Option<&Spanned<FingerprintBodyFile>>,
    field: &str,
) -> Option<FingerprintBody> {
    let input = input?;
    let file = input.get_ref();
    let (list, name, make): (_, _, fn(Pointers) -> FingerprintBody) =
        match (&file.exclude, &file.include) {
            (None, None) => return Some(FingerprintBody::Whole),
            (Some(list), None) => (list, "exclude", FingerprintBody::Exclude),
            (None, Some(list)) => (list, "include", FingerprintBody::Include),
            (Some(_), Some(_)) => {
                ctx.error(
                    Some(input.span()),
                    field,
                    "give one of exclude or include, not both",
                );
                return None;
            }
        };
    if list.get_ref().is_empty() {
        ctx.error(
            Some(list.span()),
            format!("{field}.{name}"),
            "empty: list the JSON pointers of the members (or write fingerprint_body = {})",
        );
        return None;
    }
    let mut ok = true;
    let mut pointers = Vec::new();
    for (i, item) in list.get_ref().iter().enumerate() {
        if let Err(message) = names::json_pointer(item.get_ref()) {
            ctx.error(Some(item.span()), format!("{field}.{name}[{i}]"), message);
            ok = false;
        } else if name == "exclude" && item.get_ref().is_empty() {
            // "" is the whole document: without it every JSON body would
            // match every other, and a changed request would be replayed.
            ctx.error(
                Some(item.span()),
                format!("{field}.{name}[{i}]"),
                "\"\" is the whole body: excluding it makes every JSON body match; \
                 leave \"body\" out of fingerprint instead",
            );
            ok = false;
        } else if pointers.contains(item.get_ref()) {
            ctx.error(
                Some(item.span()),
                format!("{field}.{name}[{i}]"),
                listed_twice(item.get_ref()),
            );
            ok = false;
        } else {
            if item.get_ref().is_empty() {
                ctx.warn(
                    Some(item.span()),
                    format!("{field}.{name}[{i}]"),
                    "\"\" is the whole body: including it compares the whole body, \
                     as fingerprint_body = {} does",
                );
            }
            pointers.push(item.get_ref().clone());
        }
    }
    ok.then(|| make(Pointers::new(pointers)))
}

/// The words `methods`, `scope` and the other lists refuse a repeat with.
fn listed_twice(written: &str) -> String {
    format!("{} is listed twice", quoted(written))
}

/// What one `release_statuses` entry frees the key on.
pub enum Released {
    Status(u16),
    Class(StatusClass),
}

/// One `release_statuses` entry: a final status the upstream may answer
/// that frees the key instead of being stored, or a class of them. A 2xx is
/// refused: it means the effect happened, and releasing it would let a retry
/// run the request twice. A 1xx is never a final answer.
pub fn released(input: &StatusInput) -> Result<Released, String> {
    match input {
        StatusInput::Class(class) => match class.as_str() {
            "4xx" => Ok(Released::Class(StatusClass::ClientError)),
            "5xx" => Ok(Released::Class(StatusClass::ServerError)),
            other => Err(format!(
                "{} is not a status class: only \"4xx\" and \"5xx\" are",
                quoted(other)
            )),
        },
        StatusInput::Code(code) => match u16::try_from(*code) {
            Ok(status @ 300..=599) => Ok(Released::Status(status)),
            Ok(status @ 200..=299) => Err(format!(
                "{status} is a success: it must be stored, releasing it would let a retry execute twice"
            )),
            Ok(status @ 100..=199) => {
                Err(format!("{status} is informational, never a final answer"))
            }
            _ => Err(format!("{code} is not an HTTP status (100..=599)")),
        },
    }
}

/// `expiry_header`: `""` none.
pub fn expiry_header(text: &str) -> Result<Option<HeaderName>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    names::replay_header_name(text, "the expiry", "Idempotency-Expires").map(Some)
}

/// `replay_values = [fresh, replayed]`: two different field values.
pub fn replay_values(list: &Spanned<Vec<Spanned<String>>>) -> Result<ReplayValues, String> {
    let [fresh, replayed] = list.get_ref().as_slice() else {
        return Err("give two values: [fresh, replayed]".into());
    };
    let value = |text: &Spanned<String>| {
        let text = text.get_ref();
        let visible = !text.is_empty()
            && text
                .bytes()
                .all(|b| (0x21..=0x7E).contains(&b) || b == b' ')
            && !text.starts_with(' ')
            && !text.ends_with(' ');
        if !visible {
            return Err(format!(
                "{} is not a header value: 1 or more visible ASCII characters",
                quoted(text)
            ));
        }
        HeaderValue::from_str(text).map_err(|_| format!("{} is not a header value", quoted(text)))
    };
    let (fresh, replayed) = (value(fresh)?, value(replayed)?);
    if fresh == replayed {
        return Err("the two values are equal: a client could not tell a replay".into());
    }
    Ok(ReplayValues { fresh, replayed })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ConfigErrors, Policy, StatusClass, parse};
    use crate::key::{DerivePart, FingerprintBody, KeySource};

    const ROUTE: &str = crate::config::ONE_ROUTE;

    fn policy(defaults: &str) -> Policy {
        let text = format!("[defaults]\n{defaults}\n{ROUTE}");
        match parse(&text, Path::new("t.toml"), &|_| None) {
            Ok(config) => config.routes[0].policy.clone(),
            Err(errors) => panic!("unexpected errors:\n{errors}"),
        }
    }

    /// Every error, as `check` prints it.
    fn errors(defaults: &str) -> Vec<String> {
        let text = format!("[defaults]\n{defaults}\n{ROUTE}");
        match parse(&text, Path::new("t.toml"), &|_| None) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    fn single(defaults: &str, prefix: &str, part: &str) {
        let errors = errors(defaults);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].starts_with(prefix), "{}", errors[0]);
        assert!(errors[0].contains(part), "{}", errors[0]);
    }

    const NS: &str = "6ba7b811-9dad-11d1-80b4-00c04fd430c8";

    #[test]
    fn every_source_and_a_list() {
        let p = policy(&format!(
            r#"key = [{{ header = "X-Key" }}, {{ query = "k" }}, {{ form_field = "f" }},
  {{ json_pointer = "/id" }}, {{ derive = ["/order_id", "header:X-Customer", "query:q", "form:c"], namespace = "{NS}" }}]"#
        ));
        assert_eq!(p.key.len(), 5);
        assert_eq!(p.key[0], KeySource::Header("x-key".parse().unwrap()));
        assert_eq!(p.key[1], KeySource::Query("k".into()));
        assert_eq!(p.key[2], KeySource::FormField("f".into()));
        assert_eq!(p.key[3], KeySource::JsonPointer("/id".into()));
        let KeySource::Derive(derive) = &p.key[4] else {
            panic!("{:?}", p.key[4])
        };
        assert_eq!(derive.namespace.to_string(), NS);
        assert_eq!(
            derive.parts,
            [
                DerivePart::JsonPointer("/order_id".into()),
                DerivePart::Header("x-customer".parse().unwrap()),
                DerivePart::Query("q".into()),
                DerivePart::Form("c".into()),
            ]
        );
    }

    /// A refused pointer, derive part or pattern is quoted as every refused
    /// value is (docs/configuration.md, "Values"): whole and escaped when
    /// short, by its first 64 characters and its length when long.
    #[test]
    fn a_refused_source_pointer_or_pattern_is_quoted_shortened() {
        let start = |c: char| format!("\\u{{1b}}{}", c.to_string().repeat(63));
        let long = |c: char| format!("\\u001b{}", c.to_string().repeat(999));
        for (defaults, expected) in [
            (
                format!(r#"key = {{ json_pointer = "{}" }}"#, long('x')),
                format!(
                    "t.toml:2:24: defaults.key.json_pointer: \"{}\"… (1000 bytes) \
                     is not a JSON pointer: it must be \"\" or start with \"/\"",
                    start('x')
                ),
            ),
            (
                format!(r#"key = {{ json_pointer = "/{}~" }}"#, long('x')),
                format!(
                    "t.toml:2:24: defaults.key.json_pointer: \"/{}\"… (1002 bytes) \
                     is not a JSON pointer: \"~\" must be followed by 0 or 1",
                    &start('x')[..start('x').len() - 1]
                ),
            ),
            (
                format!(r#"fingerprint_body = {{ include = ["{}"] }}"#, long('p')),
                format!(
                    "t.toml:2:33: defaults.fingerprint_body.include[0]: \"{}\"… (1000 bytes) \
                     is not a JSON pointer: it must be \"\" or start with \"/\"",
                    start('p')
                ),
            ),
            (
                format!(
                    r#"key = {{ derive = ["cookie:{}"], namespace = "{NS}" }}"#,
                    long('c')
                ),
                format!(
                    "t.toml:2:19: defaults.key.derive[0]: \"cookie:\\u{{1b}}{}\"… (1007 bytes) \
                     is not a derive part: a JSON pointer (\"/...\"), \"header:NAME\", \
                     \"query:NAME\" or \"form:NAME\"",
                    "c".repeat(56)
                ),
            ),
            (
                format!(
                    r#"key = {{ derive = ["{}:"], namespace = "{NS}" }}"#,
                    long('n')
                ),
                format!(
                    "t.toml:2:19: defaults.key.derive[0]: \"{}\"… (1001 bytes) \
                     is not a derive part: a JSON pointer (\"/...\"), \"header:NAME\", \
                     \"query:NAME\" or \"form:NAME\"",
                    start('n')
                ),
            ),
            (
                format!(
                    r#"key = {{ derive = ["header:{}"], namespace = "{NS}" }}"#,
                    "h ".repeat(100)
                ),
                format!(
                    "t.toml:2:19: defaults.key.derive[0]: \"{}\"… (200 bytes) \
                     is not a valid HTTP header name",
                    "h ".repeat(32)
                ),
            ),
            (
                format!(r#"key_pattern = "({}""#, long('r')),
                format!(
                    "t.toml:2:15: defaults.key_pattern: \"({}\"… (1001 bytes) \
                     is not a valid regex: unclosed group",
                    &start('r')[..start('r').len() - 1]
                ),
            ),
        ] {
            assert_eq!(errors(&defaults), [expected]);
        }
        // A short one is quoted whole, a control character escaped.
        single(
            r#"key = { json_pointer = "a\u001b" }"#,
            "t.toml:2:24: defaults.key.json_pointer: \"a\\u{1b}\" is not a JSON pointer",
            "start with",
        );
        single(
            &format!(r#"key = {{ derive = ["query:"], namespace = "{NS}" }}"#),
            "t.toml:2:19: defaults.key.derive[0]: \"query:\" names no query",
            "",
        );
        single(
            &format!(r#"key = {{ derive = ["header:\u001b"], namespace = "{NS}" }}"#),
            "t.toml:2:19: defaults.key.derive[0]: \"\\u{1b}\" is not a valid HTTP header name",
            "",
        );
    }

    #[test]
    fn bad_sources_are_located() {
        single(
            r#"key = { json_pointer = "id" }"#,
            "t.toml:2:24: defaults.key.json_pointer:",
            "not a JSON pointer",
        );
        single(
            &format!(r#"key = {{ derive = ["/a", "cookie:x"], namespace = "{NS}" }}"#),
            "t.toml:2:25: defaults.key.derive[1]:",
            "not a derive part",
        );
        single(
            r#"key = { derive = ["/a"], namespace = "not-a-uuid" }"#,
            "t.toml:2:38: defaults.key.namespace:",
            "not a UUID",
        );
        single(
            r#"key = { derive = ["/a"] }"#,
            "t.toml:2:7: defaults.key.namespace:",
            "needs namespace",
        );
        single(
            &format!(r#"key = {{ derive = [], namespace = "{NS}" }}"#),
            "t.toml:2:18: defaults.key.derive:",
            "no parts",
        );
        single("key = []", "t.toml:2:7: defaults.key:", "empty");
        single(
            r#"key = [{ header = "a" }, { header = "b", query = "c" }]"#,
            "t.toml:2:26: defaults.key[1]:",
            "exactly one",
        );
        single(
            &format!(r#"key = {{ header = "a", namespace = "{NS}" }}"#),
            "t.toml:2:35: defaults.key.namespace:",
            "derive",
        );
        single(
            r#"key = [{ derive = ["/a"], namespace = "x" }]"#,
            "t.toml:2:39: defaults.key[0].namespace:",
            "not a UUID",
        );
    }

    /// As in `methods` or `fingerprint`, a value written twice is a typo
    /// for another one: refused, naming the second.
    #[test]
    fn a_source_part_or_pointer_listed_twice_is_refused() {
        single(
            &format!(r#"key = {{ derive = ["/a", "/b", "/a"], namespace = "{NS}" }}"#),
            "t.toml:2:31: defaults.key.derive[2]:",
            "\"/a\" is listed twice",
        );
        // Header names are case-insensitive.
        single(
            &format!(r#"key = {{ derive = ["header:X-C", "header:x-c"], namespace = "{NS}" }}"#),
            "t.toml:2:33: defaults.key.derive[1]:",
            "listed twice",
        );
        single(
            r#"key = [{ header = "A" }, { header = "a" }]"#,
            "t.toml:2:26: defaults.key[1]:",
            "the same source as defaults.key[0]",
        );
        single(
            r#"key = [{ query = "k" }, { form_field = "k" }, { query = "k" }]"#,
            "t.toml:2:47: defaults.key[2]:",
            "the same source as defaults.key[0]",
        );
        single(
            r#"fingerprint_body = { include = ["/a", "/b", "/a"] }"#,
            "t.toml:2:45: defaults.fingerprint_body.include[2]:",
            "\"/a\" is listed twice",
        );
        single(
            r#"fingerprint_body = { exclude = ["/a", "/a"] }"#,
            "t.toml:2:39: defaults.fingerprint_body.exclude[1]:",
            "listed twice",
        );
        // Different namespaces derive different keys: not the same source.
        let other = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";
        let p = policy(&format!(
            r#"key = [{{ derive = ["/a"], namespace = "{NS}" }}, {{ derive = ["/a"], namespace = "{other}" }}]"#
        ));
        assert_eq!(p.key.len(), 2);
    }

    #[test]
    fn key_pattern_compiles_once_or_is_refused() {
        assert_eq!(policy("").key_pattern, None);
        assert_eq!(
            policy(r#"key_pattern = "uuid""#)
                .key_pattern
                .unwrap()
                .as_str(),
            "uuid"
        );
        let p = policy(r#"key_pattern = "ord_[0-9]+""#).key_pattern.unwrap();
        assert!(p.matches("ord_1") && !p.matches("ord_1x"));
        single(
            r#"key_pattern = "ord_[0-9""#,
            "t.toml:2:15: defaults.key_pattern:",
            "not a valid regex",
        );
    }

    #[test]
    fn fingerprint_body_and_form() {
        assert_eq!(policy("").fingerprint_body, FingerprintBody::Whole);
        assert_eq!(
            policy("fingerprint_body = {}").fingerprint_body,
            FingerprintBody::Whole
        );
        let p = policy(
            r#"fingerprint_body = { exclude = ["/sent_at", "/nonce"] }
canonical_form = true"#,
        );
        let FingerprintBody::Exclude(pointers) = &p.fingerprint_body else {
            panic!("{:?}", p.fingerprint_body)
        };
        assert_eq!(pointers.as_written(), ["/sent_at", "/nonce"]);
        assert!(p.canonical_form);
        single(
            r#"fingerprint_body = { include = ["/a", "b"] }"#,
            "t.toml:2:39: defaults.fingerprint_body.include[1]:",
            "not a JSON pointer",
        );
        single(
            r#"fingerprint_body = { include = ["/a"], exclude = ["/b"] }"#,
            "t.toml:2:20: defaults.fingerprint_body:",
            "not both",
        );
        single(
            r#"fingerprint_body = { exclude = ["/a", ""] }"#,
            "t.toml:2:39: defaults.fingerprint_body.exclude[1]:",
            "whole body",
        );
        single(
            r#"fingerprint_body = { include = [] }"#,
            "t.toml:2:32: defaults.fingerprint_body.include:",
            "empty",
        );
    }

    #[test]
    fn release_classes() {
        let p = policy(r#"release_statuses = [429, "5xx", "4xx"]"#);
        assert_eq!(p.release_statuses, [429]);
        assert_eq!(
            p.release_classes,
            [StatusClass::ServerError, StatusClass::ClientError]
        );
        assert_eq!(policy("").release_classes, []);
        single(
            r#"release_statuses = ["2xx"]"#,
            "t.toml:2:21: defaults.release_statuses[0]:",
            "only \"4xx\" and \"5xx\"",
        );
    }

    #[test]
    fn release_statuses_are_final_answers_but_not_successes() {
        for (status, message) in [
            ("200", "200 is a success: it must be stored"),
            ("299", "299 is a success"),
            ("101", "101 is informational, never a final answer"),
            ("99", "99 is not an HTTP status (100..=599)"),
            ("700", "700 is not an HTTP status (100..=599)"),
            ("70000", "70000 is not an HTTP status (100..=599)"),
            ("-1", "-1 is not an HTTP status (100..=599)"),
        ] {
            single(
                &format!("release_statuses = [{status}]"),
                "t.toml:2:21: defaults.release_statuses[0]:",
                message,
            );
        }
        let p = policy(r#"release_statuses = [300, 599, "4xx", 300, "4xx"]"#);
        assert_eq!(p.release_statuses, [300, 599]);
        assert_eq!(p.release_classes, [StatusClass::ClientError]);
    }

    /// `""` is the whole body (RFC 6901): as a derive part it yields a key
    /// only for a body that is a bare JSON string or number, and as an
    /// include it is the whole document, as `fingerprint_body = {}`. Both
    /// are said; neither stops the file.
    #[test]
    fn the_whole_body_as_a_pointer_is_a_warning() {
        let warnings = |defaults: &str| {
            let text = format!("[defaults]\n{defaults}\n{ROUTE}");
            parse(&text, Path::new("t.toml"), &|_| None)
                .expect("valid")
                .warnings
        };
        let derive = warnings(&format!(
            r#"key = {{ derive = ["/a", ""], namespace = "{NS}" }}"#
        ));
        assert_eq!(derive.len(), 1, "{derive:#?}");
        assert!(
            derive[0].starts_with("t.toml:2:25: defaults.key.derive[1]: \"\" is the whole body"),
            "{}",
            derive[0]
        );
        let include = warnings(r#"fingerprint_body = { include = ["/a", ""] }"#);
        assert_eq!(include.len(), 1, "{include:#?}");
        assert!(
            include[0].starts_with(
                "t.toml:2:39: defaults.fingerprint_body.include[1]: \"\" is the whole body"
            ),
            "{}",
            include[0]
        );
    }

    /// A status or class written twice is ignored and said, as a method
    /// twice in `match.methods` is: a typo for another one, in a field old
    /// files have (so a warning, not an error).
    #[test]
    fn a_release_entry_listed_twice_is_a_warning() {
        let text = format!("[defaults]\nrelease_statuses = [429, \"5xx\", 429, \"5xx\"]\n{ROUTE}");
        let config = parse(&text, Path::new("t.toml"), &|_| None).expect("valid");
        assert_eq!(config.warnings.len(), 2, "{:#?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("t.toml:2:33: defaults.release_statuses[2]: 429 is listed twice (the repeat is ignored)"),
            "{}",
            config.warnings[0]
        );
        assert!(
            config.warnings[1]
                .starts_with("t.toml:2:38: defaults.release_statuses[3]: \"5xx\" is listed twice"),
            "{}",
            config.warnings[1]
        );
    }

    #[test]
    fn answer_headers() {
        let p = policy(
            r#"expiry_header = "Idempotency-Expires"
replay_headers = ["Location", "ETag"]
replay_header = "Idempotency-Result"
replay_values = ["new", "cached"]"#,
        );
        assert_eq!(p.expiry_header.unwrap(), "idempotency-expires");
        assert_eq!(p.replay_headers, ["location", "etag"]);
        assert_eq!(p.replay_values.fresh, "new");
        assert_eq!(p.replay_values.replayed, "cached");
        assert_eq!(policy(r#"expiry_header = """#).expiry_header, None);
        single(
            r#"replay_values = ["same", "same"]"#,
            "t.toml:2:17: defaults.replay_values:",
            "equal",
        );
        single(
            r#"replay_values = ["one"]"#,
            "t.toml:2:17: defaults.replay_values:",
            "two values",
        );
        single(
            r#"expiry_header = "Content-Type""#,
            "t.toml:2:17: defaults.expiry_header:",
            "Idempotency-Expires",
        );
        // The gateway's own fields may not share a name.
        single(
            r#"expiry_header = "Idempotent-Replayed""#,
            "t.toml:2:17: defaults.expiry_header:",
            "replace the replay marker",
        );
        single(
            r#"replay_header = "Idempotency-Key""#,
            "t.toml:2:17: defaults.replay_header:",
            "Idempotent-Replayed",
        );
        single(
            r#"expiry_header = "idempotency-key""#,
            "t.toml:2:17: defaults.expiry_header:",
            "answers carry: the expiry would replace it",
        );
        single(
            r#"expiry_header = "Connection""#,
            "t.toml:2:17: defaults.expiry_header:",
            "the expiry would be lost",
        );
        single(
            r#"replay_header = "Link""#,
            "t.toml:2:17: defaults.replay_header:",
            "the marker would replace it",
        );
        for name in ["Set-Cookie", "Expires", "ETag", "Cache-Control", "Vary"] {
            single(
                &format!("expiry_header = \"{name}\""),
                "t.toml:2:17: defaults.expiry_header:",
                "answers carry: the expiry would replace it",
            );
        }
    }

    #[test]
    fn check_prints_the_options_only_when_set() {
        let text = |defaults: &str| format!("[defaults]\n{defaults}\n{ROUTE}");
        let plain = parse(&text(""), Path::new("t.toml"), &|_| None).unwrap();
        let plain = crate::config::describe(&plain);
        assert!(
            plain.contains("header idempotency-key, optional"),
            "{plain}"
        );
        for absent in ["key pattern", "body ", "5xx", "expiry", "replay values"] {
            assert!(!plain.contains(absent), "{absent}: {plain}");
        }
        let set = parse(
            &text(&format!(
                r#"key = [{{ header = "X-Key" }}, {{ derive = ["/id"], namespace = "{NS}" }}]
key_pattern = "uuid"
fingerprint_body = {{ exclude = ["/nonce"] }}
release_statuses = ["5xx"]
expiry_header = "Idempotency-Expires"
replay_values = ["new", "cached"]"#
            )),
            Path::new("t.toml"),
            &|_| None,
        )
        .unwrap();
        let set = crate::config::describe(&set);
        for line in [
            format!("header x-key, else derive [/id] namespace {NS}, optional"),
            "key pattern    \"uuid\"".to_owned(),
            "body exclude   /nonce".to_owned(),
            "release        5xx".to_owned(),
            "expiry header  idempotency-expires".to_owned(),
            "replay values  new (fresh), cached (replayed)".to_owned(),
        ] {
            assert!(set.contains(&line), "{line}: {set}");
        }
    }

    #[test]
    fn problem_base_is_an_absolute_uri() {
        let text = |base: &str| format!("[server]\nproblem_base = {base:?}\n{ROUTE}");
        let config = parse(
            &text("https://docs.example.com/errors/"),
            Path::new("t.toml"),
            &|_| None,
        )
        .unwrap();
        assert_eq!(
            config.server.problem_base.as_deref(),
            Some("https://docs.example.com/errors/")
        );
        for good in ["tag:example.com,2024:errors:", "urn:ietf:params:errors:"] {
            let config = parse(&text(good), Path::new("t.toml"), &|_| None).unwrap();
            assert_eq!(config.server.problem_base.as_deref(), Some(good));
        }
        for bad in [
            "errors/",
            "https://docs.example.com/a b/",
            "https://x/<",
            "1http://x/",
            "https:",
            ":errors",
        ] {
            let errors = parse(&text(bad), Path::new("t.toml"), &|_| None).unwrap_err();
            assert!(
                errors.to_string().contains("server.problem_base"),
                "{bad}: {errors}"
            );
        }
    }
}

//! Where a route's key comes from (`key = { ... }`, or a list of them tried
//! in order), and reading it off a request.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, header};
use serde_json::Value;
use uuid::Uuid;

use super::pointer::PointerError;
use super::{KeyError, derive, form};

/// One configured source of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// An RFC 8941 sf-string or a bare token in this header.
    Header(HeaderName),
    /// A string or number of a JSON body, at this RFC 6901 pointer.
    JsonPointer(String),
    /// A query parameter, percent-decoded.
    Query(String),
    /// A field of an `application/x-www-form-urlencoded` body.
    FormField(String),
    /// A UUIDv5 of business identifiers.
    Derive(Derive),
}

/// `{ derive = [...], namespace = "<UUID>" }`: never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derive {
    pub parts: Vec<DerivePart>,
    pub namespace: Uuid,
}

/// One part of a derived key's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DerivePart {
    /// `/pointer`: a string or number of the JSON body.
    JsonPointer(String),
    /// `header:NAME`: the field value, each line trimmed and the lines joined
    /// by `, ` (`Cookie`'s by `; `); `Host` is the target's authority when
    /// it has one ([`RequestView`]).
    Header(HeaderName),
    /// `query:NAME`
    Query(String),
    /// `form:NAME`
    Form(String),
}

impl KeySource {
    /// Whether reading this source needs the request body.
    pub fn needs_body(&self) -> bool {
        match self {
            KeySource::Header(_) | KeySource::Query(_) => false,
            KeySource::JsonPointer(_) | KeySource::FormField(_) => true,
            KeySource::Derive(derive) => derive
                .parts
                .iter()
                .any(|part| matches!(part, DerivePart::JsonPointer(_) | DerivePart::Form(_))),
        }
    }

    /// As written in the config (for `check` and messages).
    pub fn describe(&self) -> String {
        match self {
            KeySource::Header(name) => format!("header {name}"),
            KeySource::JsonPointer(pointer) => format!("json_pointer {pointer:?}"),
            KeySource::Query(name) => format!("query {name:?}"),
            KeySource::FormField(name) => format!("form_field {name:?}"),
            KeySource::Derive(derive) => {
                let parts: Vec<String> = derive.parts.iter().map(DerivePart::describe).collect();
                format!(
                    "derive [{}] namespace {}",
                    parts.join(","),
                    derive.namespace
                )
            }
        }
    }
}

impl DerivePart {
    /// `/pointer`, `header:NAME`, `query:NAME` or `form:NAME`.
    pub fn parse(text: &str) -> Result<Self, DerivePartError> {
        if text.starts_with('/') || text.is_empty() {
            return super::pointer::check(text)
                .map(|()| DerivePart::JsonPointer(text.to_owned()))
                .map_err(DerivePartError::Pointer);
        }
        let unknown = || DerivePartError::Unknown(text.to_owned());
        let (prefix, name) = text.split_once(':').ok_or_else(unknown)?;
        let prefix = match prefix {
            "header" => "header",
            "query" => "query",
            "form" => "form",
            _ => return Err(unknown()),
        };
        if name.is_empty() {
            return Err(DerivePartError::NoName {
                text: text.to_owned(),
                prefix,
            });
        }
        match prefix {
            "header" => HeaderName::from_bytes(name.as_bytes())
                .map(DerivePart::Header)
                .map_err(|_| DerivePartError::HeaderName(name.to_owned())),
            "query" => Ok(DerivePart::Query(name.to_owned())),
            _ => Ok(DerivePart::Form(name.to_owned())),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            DerivePart::JsonPointer(pointer) => pointer.clone(),
            DerivePart::Header(name) => format!("header:{name}"),
            DerivePart::Query(name) => format!("query:{name}"),
            DerivePart::Form(name) => format!("form:{name}"),
        }
    }
}

/// Why a text is not a derive part; it holds the text. Shown, it is what
/// a message says after the text ([`DerivePartError::written`]), which the
/// message quotes as it quotes every value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DerivePartError {
    #[error("{0}")]
    Pointer(#[source] PointerError),
    /// `header:`, `query:` or `form:` with nothing after it.
    #[error("names no {prefix}")]
    NoName { text: String, prefix: &'static str },
    /// The name after `header:`.
    #[error("is not a valid HTTP header name")]
    HeaderName(String),
    #[error(
        "is not a derive part: a JSON pointer (\"/...\"), \"header:NAME\", \
         \"query:NAME\" or \"form:NAME\""
    )]
    Unknown(String),
}

impl DerivePartError {
    /// The text refused: the part as written, or the header name in it.
    pub fn written(&self) -> &str {
        match self {
            DerivePartError::Pointer(error) => error.written(),
            DerivePartError::NoName { text, .. }
            | DerivePartError::HeaderName(text)
            | DerivePartError::Unknown(text) => text,
        }
    }
}

/// What the key sources read of a request. The body is `None` when no
/// source needs it (it is then not read at all).
pub struct RequestView<'a> {
    pub headers: &'a HeaderMap,
    pub query: Option<&'a str>,
    pub body: Option<&'a [u8]>,
    /// The request target's authority, when it has one: HTTP/2's
    /// `:authority` (no `Host` field comes with it), or an HTTP/1.1
    /// absolute-form target's, which wins over a `Host` field (RFC 9112
    /// §3.2.2). A `header:Host` part reads it, so a client's protocol does
    /// not decide whether its key can be derived.
    authority: Option<&'a str>,
    /// The body parsed as JSON, once, for every pointer that needs it.
    json: std::cell::OnceCell<Option<Value>>,
}

/// A key found by a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundKey {
    pub key: String,
    /// Made by the gateway (`derive`), not sent by the client: it is told
    /// the key in `Idempotency-Key`, and `key_pattern` does not apply.
    pub derived: bool,
}

impl<'a> RequestView<'a> {
    pub fn new(headers: &'a HeaderMap, query: Option<&'a str>, body: Option<&'a [u8]>) -> Self {
        Self {
            headers,
            query,
            body,
            authority: None,
            json: std::cell::OnceCell::new(),
        }
    }

    /// With the request target's authority (`Uri::authority`), if any.
    pub fn with_authority(mut self, authority: Option<&'a str>) -> Self {
        self.authority = authority;
        self
    }

    /// The key of the first source that yields one. A source that finds a
    /// key present but invalid ends the search with `Invalid`: a client that
    /// sent a bad key is told so, not keyed by something else.
    pub fn key(&self, sources: &[KeySource]) -> Result<FoundKey, KeyError> {
        for source in sources {
            match self.source(source) {
                Err(KeyError::Missing) => continue,
                other => return other,
            }
        }
        Err(KeyError::Missing)
    }

    fn source(&self, source: &KeySource) -> Result<FoundKey, KeyError> {
        let sent = |key: String| FoundKey {
            key,
            derived: false,
        };
        match source {
            KeySource::Header(name) => {
                let mut values = self.headers.get_all(name).iter();
                match (values.next(), values.next()) {
                    (None, _) => Err(KeyError::Missing),
                    // Two lines are one field, `a, b` (RFC 9110 §5.3): never one key.
                    (Some(_), Some(_)) => {
                        Err(KeyError::Invalid("the key header is sent more than once"))
                    }
                    (Some(value), None) => super::from_header_value(value.as_bytes()).map(sent),
                }
            }
            KeySource::JsonPointer(pointer) => match self.json()?.pointer(pointer) {
                Some(Value::String(s)) => {
                    super::validate(s)?;
                    Ok(sent(s.clone()))
                }
                // Numbers keep the key they always had (`json_pointer.rs`).
                Some(Value::Number(n)) => {
                    let key = super::json_pointer::number_key(n);
                    super::validate(&key)?;
                    Ok(sent(key))
                }
                _ => Err(KeyError::Missing),
            },
            KeySource::Query(name) => text_key(self.query_value(name)).map(sent),
            KeySource::FormField(name) => text_key(self.form_value(name)).map(sent),
            KeySource::Derive(derive) => {
                let values = derive
                    .parts
                    .iter()
                    .map(|part| self.part(part).ok_or(KeyError::Missing))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(FoundKey {
                    key: derive::derive(&derive.namespace, values.iter().map(AsRef::as_ref)),
                    derived: true,
                })
            }
        }
    }

    fn part(&self, part: &DerivePart) -> Option<Cow<'a, [u8]>> {
        match part {
            DerivePart::JsonPointer(pointer) => {
                let value = self.json().ok()?.pointer(pointer)?;
                derive::json_part(value).map(Cow::Owned)
            }
            DerivePart::Header(name) => {
                if *name == header::HOST
                    && let Some(authority) = self.authority
                {
                    return Some(Cow::Borrowed(authority.as_bytes()));
                }
                let mut lines = self.headers.get_all(name).iter();
                let first = lines.next()?;
                // Cookie lines join with "; " (RFC 9113 §8.2.3): an HTTP/2
                // client sends each cookie on a line of its own, an HTTP/1
                // client all on one.
                let separator: &[u8] = if *name == header::COOKIE {
                    b"; "
                } else {
                    b", "
                };
                let mut joined = Cow::Borrowed(first.as_bytes().trim_ascii());
                for line in lines {
                    let owned = joined.to_mut();
                    owned.extend_from_slice(separator);
                    owned.extend_from_slice(line.as_bytes().trim_ascii());
                }
                Some(joined)
            }
            DerivePart::Query(name) => self.query_value(name),
            DerivePart::Form(name) => self.form_value(name),
        }
    }

    fn json(&self) -> Result<&Value, KeyError> {
        self.json
            .get_or_init(|| {
                // serde_json caps nesting at 128 levels: a hostile body is a
                // parse error, not a stack overflow.
                self.body.and_then(|body| serde_json::from_slice(body).ok())
            })
            .as_ref()
            .ok_or(KeyError::Missing)
    }

    fn query_value(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        form::first_value(self.query?.as_bytes(), name)
    }

    /// Only a form body has fields: another body has none.
    fn form_value(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        let content_type = self.headers.get(header::CONTENT_TYPE)?;
        if !form::is_form_urlencoded(content_type.as_bytes()) {
            return None;
        }
        form::first_value(self.body?, name)
    }
}

/// A query or form value as a key, decoded: present but empty or not
/// printable ASCII is `Invalid`. Spaces are kept (`+` decodes to one), as in
/// a quoted header key: `?k=a+b` is the key of `Idempotency-Key: "a b"`. A
/// value that starts with `"` is an sf-string, as in a header, so
/// `?k=%22abc%22` is the key `abc` and `?k=%22abc` is `Invalid`: a client
/// sending one key by header or by query has one record.
fn text_key(value: Option<Cow<'_, [u8]>>) -> Result<String, KeyError> {
    let value = value.ok_or(KeyError::Missing)?;
    if value.first() == Some(&b'"') {
        return super::from_header_value(&value);
    }
    let text = std::str::from_utf8(&value)
        .map_err(|_| KeyError::Invalid("contains a character that is not printable ASCII"))?;
    super::validate_printable(text)?;
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Uuid = Uuid::NAMESPACE_URL;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    fn derive(parts: &[&str]) -> KeySource {
        KeySource::Derive(Derive {
            parts: parts
                .iter()
                .map(|p| DerivePart::parse(p).unwrap())
                .collect(),
            namespace: NS,
        })
    }

    fn header(name: &'static str) -> KeySource {
        KeySource::Header(HeaderName::from_static(name))
    }

    #[test]
    fn list_takes_the_first_present_and_stops_at_an_invalid_one() {
        let sources = [header("idempotency-key"), KeySource::Query("k".into())];
        let none = headers(&[]);
        let view = RequestView::new(&none, Some("k=q1"), None);
        assert_eq!(view.key(&sources).unwrap().key, "q1");
        let with = headers(&[("idempotency-key", "h1")]);
        let view = RequestView::new(&with, Some("k=q1"), None);
        assert_eq!(view.key(&sources).unwrap().key, "h1");
        let bad = headers(&[("idempotency-key", "\"open")]);
        let view = RequestView::new(&bad, Some("k=q1"), None);
        assert!(matches!(view.key(&sources), Err(KeyError::Invalid(_))));
        let view = RequestView::new(&none, None, None);
        assert_eq!(view.key(&sources), Err(KeyError::Missing));
    }

    #[test]
    fn a_query_or_form_value_starting_with_a_quote_is_an_sf_string() {
        let query = [KeySource::Query("k".into())];
        let form = [KeySource::FormField("k".into())];
        let form_type = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        let none = HeaderMap::new();
        for (sent, key) in [
            ("%22abc%22", "abc"),
            ("%22a+b%22", "a b"),
            ("%22say+%5C%22hi%5C%22%22", "say \"hi\""),
            ("%22k1%22%3Bv%3D2", "k1"),
            ("a%22b", "a\"b"),
        ] {
            let text = format!("k={sent}");
            let by_query = RequestView::new(&none, Some(&text), None).key(&query);
            assert_eq!(by_query.unwrap().key, key, "{sent}");
            let by_form = RequestView::new(&form_type, None, Some(text.as_bytes())).key(&form);
            assert_eq!(by_form.unwrap().key, key, "{sent}");
        }
        for sent in ["%22abc", "%22%22", "%22abc%22x", "%22k1%22%3BV%3D2"] {
            let text = format!("k={sent}");
            let by_query = RequestView::new(&none, Some(&text), None).key(&query);
            assert!(matches!(by_query, Err(KeyError::Invalid(_))), "{sent}");
            let by_form = RequestView::new(&form_type, None, Some(text.as_bytes())).key(&form);
            assert!(matches!(by_form, Err(KeyError::Invalid(_))), "{sent}");
        }
    }

    #[test]
    fn form_fields_need_a_form_body() {
        let source = [KeySource::FormField("k".into())];
        let form = headers(&[("content-type", "application/x-www-form-urlencoded")]);
        let json = headers(&[("content-type", "application/json")]);
        let body = Some(&b"a=1&k=f%2D1&k=f2"[..]);
        assert_eq!(
            RequestView::new(&form, None, body)
                .key(&source)
                .unwrap()
                .key,
            "f-1"
        );
        assert_eq!(
            RequestView::new(&json, None, body).key(&source),
            Err(KeyError::Missing)
        );
    }

    #[test]
    fn derive_needs_every_part_and_reads_numbers_canonically() {
        let source = [derive(&["/order", "header:x-customer", "query:q"])];
        let h = headers(&[("x-customer", " cus_9 ")]);
        let found = RequestView::new(&h, Some("q=a+b"), Some(br#"{"order":42.0}"#))
            .key(&source)
            .unwrap();
        assert!(found.derived);
        let expected = derive::derive(&NS, [&b"42"[..], b"cus_9", b"a b"]);
        assert_eq!(found.key, expected);
        let missing = RequestView::new(&h, None, Some(br#"{"order":42}"#)).key(&source);
        assert_eq!(missing, Err(KeyError::Missing));
        let not_string = RequestView::new(&h, Some("q=1"), Some(br#"{"order":true}"#)).key(&source);
        assert_eq!(not_string, Err(KeyError::Missing));
    }

    #[test]
    fn a_host_part_is_the_target_authority_when_there_is_one() {
        let source = [derive(&["header:host"])];
        let expected = derive::derive(&NS, [&b"api.example"[..]]);
        let none = headers(&[]);
        // HTTP/2: `:authority`, no Host field.
        let h2 = RequestView::new(&none, None, None).with_authority(Some("api.example"));
        assert_eq!(h2.key(&source).unwrap().key, expected);
        let host = headers(&[("host", "api.example")]);
        let h1 = RequestView::new(&host, None, None).with_authority(None);
        assert_eq!(h1.key(&source).unwrap().key, expected);
        // An absolute-form target wins over the Host field.
        let other = headers(&[("host", "other.example")]);
        let absolute = RequestView::new(&other, None, None).with_authority(Some("api.example"));
        assert_eq!(absolute.key(&source).unwrap().key, expected);
        assert_eq!(
            RequestView::new(&none, None, None).key(&source),
            Err(KeyError::Missing)
        );
    }

    #[test]
    fn cookie_lines_join_as_one_cookie_string() {
        let source = [derive(&["header:cookie"])];
        let one = headers(&[("cookie", "a=1; b=2")]);
        let two = headers(&[("cookie", "a=1"), ("cookie", "b=2")]);
        assert_eq!(
            RequestView::new(&one, None, None).key(&source),
            RequestView::new(&two, None, None).key(&source)
        );
        let other = headers(&[("x-c", "a=1"), ("x-c", "b=2")]);
        let expected = derive::derive(&NS, [&b"a=1, b=2"[..]]);
        assert_eq!(
            RequestView::new(&other, None, None)
                .key(&[derive(&["header:x-c"])])
                .unwrap()
                .key,
            expected
        );
    }

    #[test]
    fn json_pointer_keys_are_as_before() {
        let source = [KeySource::JsonPointer("/id".into())];
        let h = headers(&[]);
        for (body, key) in [(r#"{"id":"abc"}"#, "abc"), (r#"{"id":1.50}"#, "1.5")] {
            let view = RequestView::new(&h, None, Some(body.as_bytes()));
            assert_eq!(view.key(&source).unwrap().key, key);
            assert_eq!(
                crate::key::from_json_body(body.as_bytes(), "/id").unwrap(),
                key
            );
        }
        let view = RequestView::new(&h, None, Some(br#"{"id":"a b"}"#));
        assert!(matches!(view.key(&source), Err(KeyError::Invalid(_))));
    }

    #[test]
    fn derive_parts_parse() {
        assert_eq!(
            DerivePart::parse("/a~1b"),
            Ok(DerivePart::JsonPointer("/a~1b".into()))
        );
        assert_eq!(
            DerivePart::parse("form:f"),
            Ok(DerivePart::Form("f".into()))
        );
        assert_eq!(
            DerivePart::parse("cookie:x"),
            Err(DerivePartError::Unknown("cookie:x".into()))
        );
        assert!(matches!(
            DerivePart::parse("header:"),
            Err(DerivePartError::NoName { prefix, .. }) if prefix == "header"
        ));
        assert_eq!(
            DerivePart::parse("header:bad name"),
            Err(DerivePartError::HeaderName("bad name".into()))
        );
        assert_eq!(
            DerivePart::parse("a~2"),
            Err(DerivePartError::Unknown("a~2".into()))
        );
        assert_eq!(
            DerivePart::parse("/a~2"),
            Err(DerivePartError::Pointer(PointerError::BadEscape(
                "/a~2".into()
            )))
        );
    }
}

//! Phase "identity": what identifies a record (its scope) and what a reuse
//! of its key must match (its fingerprint), read off the request.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;
use http::header::{self, AsHeaderName};
use http::request::Parts;

use crate::client_info::ClientInfo;
use crate::config::ScopePart;
use crate::key::{self, FingerprintInput};
use crate::route::RoutePolicy;

pub fn scope(policy: &RoutePolicy, parts: &Parts, client: &ClientInfo) -> Arc<str> {
    let values: Vec<(&str, Option<Cow<'_, [u8]>>)> = policy
        .scope_parts()
        .map(|(label, source)| {
            let value = match source {
                ScopePart::Header(name) => header_part(parts, name.as_str()),
                ScopePart::ClientCert => client
                    .cert_subject
                    .as_deref()
                    .map(|subject| Cow::Borrowed(subject.as_bytes())),
            };
            (label, value)
        })
        .collect();
    key::scope_hash(&values)
}

pub fn fingerprint(policy: &RoutePolicy, parts: &Parts, body: &[u8]) -> String {
    let header = |name: &str| header_part(parts, name);
    let input = FingerprintInput {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query(),
        body,
        header: &header,
    };
    let rules = key::BodyRules {
        canonical_json: policy.canonical_json,
        fingerprint_body: &policy.fingerprint_body,
        canonical_form: policy.canonical_form,
        // Multipart bodies are always read by their parts.
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .map(http::HeaderValue::as_bytes),
    };
    key::fingerprint_with(&policy.fingerprint, &input, &rules)
}

/// What a `header:NAME` part of scope or fingerprint reads; `name` is lower
/// case (config). `Host` is the request's host however it was sent: over
/// HTTP/2 the `:authority` (no `Host` field comes with it), and the authority
/// of an HTTP/1.1 absolute-form target wins over a `Host` field (RFC 9112
/// §3.2.2), as for the `Host` the upstream gets (`proxy::prepare_request`).
/// Else an HTTP/2 client would be another tenant than an HTTP/1 one.
fn header_part<'a>(parts: &'a Parts, name: &str) -> Option<Cow<'a, [u8]>> {
    match name {
        "host" => match parts.uri.authority() {
            Some(authority) => Some(Cow::Borrowed(authority.as_str().as_bytes())),
            None => field_value(&parts.headers, header::HOST, false),
        },
        "cookie" => field_value(&parts.headers, header::COOKIE, true),
        _ => field_value(&parts.headers, name, false),
    }
}

/// A header's field value as HTTP defines it: the lines of one name are one
/// field, their values joined by ", " in order (RFC 9110 §5.3). So `a` and `b`
/// on two lines are `a, b`, as on one line, and never just `a`: a second line
/// cannot go unnoticed by the fingerprint, nor ride on the first's scope.
///
/// `Cookie` is the exception: its lines join with "; " (RFC 9113 §8.2.3,
/// RFC 6265 §5.4), so an HTTP/2 client that sends each cookie on a line of its
/// own is the same tenant and the same request as an HTTP/1 client that sends
/// them on one line.
fn field_value<'a>(
    headers: &'a HeaderMap,
    name: impl AsHeaderName,
    is_cookie: bool,
) -> Option<Cow<'a, [u8]>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(Cow::Borrowed(first.as_bytes()));
    };
    let separator: &[u8] = if is_cookie { b"; " } else { b", " };
    let mut joined = first.as_bytes().to_vec();
    for line in std::iter::once(second).chain(lines) {
        joined.extend_from_slice(separator);
        joined.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_one_name_are_one_field() {
        let mut headers = HeaderMap::new();
        assert_eq!(field_value(&headers, "x-tenant", false), None);
        headers.append("x-tenant", "a".parse().unwrap());
        assert_eq!(
            field_value(&headers, "x-tenant", false).as_deref(),
            Some(&b"a"[..])
        );
        headers.append("x-tenant", "b".parse().unwrap());
        headers.append("x-tenant", "c".parse().unwrap());
        assert_eq!(
            field_value(&headers, "x-tenant", false).as_deref(),
            Some(&b"a, b, c"[..])
        );
    }

    #[test]
    fn host_is_the_target_authority_when_there_is_one() {
        let parts = |uri: &str, host: Option<&str>| {
            let mut request = http::Request::builder().uri(uri);
            if let Some(host) = host {
                request = request.header("host", host);
            }
            request.body(()).unwrap().into_parts().0
        };
        let origin_form = parts("/v1/x", Some("api.example"));
        assert_eq!(
            header_part(&origin_form, "host").as_deref(),
            Some(&b"api.example"[..])
        );
        // HTTP/2: `:authority`, no Host field.
        let h2 = parts("http://api.example/v1/x", None);
        assert_eq!(
            header_part(&h2, "host").as_deref(),
            Some(&b"api.example"[..])
        );
        let absolute = parts("http://api.example/v1/x", Some("other.example"));
        assert_eq!(
            header_part(&absolute, "host").as_deref(),
            Some(&b"api.example"[..])
        );
        assert_eq!(header_part(&parts("/v1/x", None), "host"), None);
    }

    #[test]
    fn cookie_lines_join_as_one_cookie_string() {
        let mut headers = HeaderMap::new();
        headers.append("cookie", "a=1".parse().unwrap());
        headers.append("cookie", "b=2; c=3".parse().unwrap());
        assert_eq!(
            field_value(&headers, "cookie", true).as_deref(),
            Some(&b"a=1; b=2; c=3"[..])
        );
    }
}

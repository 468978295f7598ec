//! Phase "fingerprint": what identifies a record (its scope) and what a reuse
//! of its key must match (its fingerprint), read off the request.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;
use http::header::AsHeaderName;
use http::request::Parts;

use crate::key::{self, FingerprintInput};
use crate::proxy::ClientInfo;
use crate::route::{RoutePolicy, ScopeSource};

pub fn scope(policy: &RoutePolicy, parts: &Parts, client: &ClientInfo) -> Arc<str> {
    let values: Vec<(&str, Option<Cow<'_, [u8]>>)> = policy
        .scope
        .iter()
        .map(|(label, source)| {
            let value = match source {
                ScopeSource::Header(name) => {
                    field_value(&parts.headers, name, *name == http::header::COOKIE)
                }
                ScopeSource::ClientCert => client
                    .cert_subject
                    .as_deref()
                    .map(|subject| Cow::Borrowed(subject.as_bytes())),
            };
            (label.as_str(), value)
        })
        .collect();
    key::scope_hash(&values)
}

pub fn fingerprint(policy: &RoutePolicy, parts: &Parts, body: &[u8]) -> String {
    // Fingerprint header names are lower case (config::FingerprintPart).
    let header = |name: &str| field_value(&parts.headers, name, name == "cookie");
    let input = FingerprintInput {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query(),
        body,
        header: &header,
    };
    key::fingerprint(&policy.fingerprint, &input, policy.canonical_json)
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

//! Phase "fingerprint": what identifies a record (its scope) and what a reuse
//! of its key must match (its fingerprint), read off the request.

use std::sync::Arc;

use http::request::Parts;

use crate::key::{self, FingerprintInput};
use crate::proxy::ClientInfo;
use crate::route::{RoutePolicy, ScopeSource};

pub fn scope(policy: &RoutePolicy, parts: &Parts, client: &ClientInfo) -> Arc<str> {
    let values: Vec<(&str, Option<&[u8]>)> = policy
        .scope
        .iter()
        .map(|(label, source)| {
            let value = match source {
                ScopeSource::Header(name) => parts.headers.get(name).map(|v| v.as_bytes()),
                ScopeSource::ClientCert => client.cert_subject.as_deref().map(str::as_bytes),
            };
            (label.as_str(), value)
        })
        .collect();
    key::scope_hash(&values)
}

pub fn fingerprint(policy: &RoutePolicy, parts: &Parts, body: &[u8]) -> String {
    let header = |name: &str| parts.headers.get(name).map(|v| v.as_bytes());
    let input = FingerprintInput {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query(),
        body,
        header: &header,
    };
    key::fingerprint(&policy.fingerprint, &input, policy.canonical_json)
}

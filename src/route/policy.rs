//! A route's idempotency policy as the request path reads it, taken from the
//! parsed config, and the labels its scope parts are hashed under.

use std::time::Duration;

use http::{HeaderName, Method};

use crate::config::{
    FingerprintBody, FingerprintPart, InFlightMode, KeyPattern, KeySource, Policy, ReplayValues,
    ScopePart, StatusClass, StoreErrorMode,
};

/// The effective idempotency policy of a route, in the request path's terms.
#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub methods: Vec<Method>,
    /// Tried in order (`crate::key::RequestView::key`); never empty.
    pub key: Vec<KeySource>,
    pub required: bool,
    pub retention: Duration,
    pub lock_timeout: Duration,
    pub on_in_flight: InFlightMode,
    pub wait_timeout: Duration,
    /// Label and source of each scope part, in configured order.
    pub scope: Vec<(String, ScopePart)>,
    pub fingerprint: Vec<FingerprintPart>,
    pub canonical_json: bool,
    pub release_statuses: Vec<u16>,
    pub forward_key: bool,
    pub replay_header: HeaderName,
    pub replay_exclude_headers: Vec<HeaderName>,
    pub on_store_error: StoreErrorMode,
    pub max_request_body: u64,
    /// 0: no limit.
    pub max_in_flight: usize,
    pub key_pattern: Option<KeyPattern>,
    pub fingerprint_body: FingerprintBody,
    pub canonical_form: bool,
    pub release_classes: Vec<StatusClass>,
    pub expiry_header: Option<HeaderName>,
    pub replay_headers: Vec<HeaderName>,
    pub replay_values: ReplayValues,
}

impl RoutePolicy {
    /// The model's values as they are: `config` parsed every one of them.
    pub fn new(policy: &Policy, max_request_body: u64) -> Self {
        Self {
            methods: policy.methods.clone(),
            key: policy.key.clone(),
            required: policy.required,
            retention: policy.retention,
            lock_timeout: policy.lock_timeout,
            on_in_flight: policy.on_in_flight,
            wait_timeout: policy.wait_timeout,
            scope: policy
                .scope
                .iter()
                .map(|part| (scope_label(part), part.clone()))
                .collect(),
            fingerprint: policy.fingerprint.clone(),
            canonical_json: policy.canonical_json,
            release_statuses: policy.release_statuses.clone(),
            forward_key: policy.forward_key,
            replay_header: policy.replay_header.name().clone(),
            replay_exclude_headers: policy.replay_exclude_headers.clone(),
            on_store_error: policy.on_store_error,
            max_request_body,
            max_in_flight: policy.max_in_flight,
            key_pattern: policy.key_pattern.clone(),
            fingerprint_body: policy.fingerprint_body.clone(),
            canonical_form: policy.canonical_form,
            release_classes: policy.release_classes.clone(),
            expiry_header: policy.expiry_header.clone(),
            replay_headers: policy.replay_headers.clone(),
            replay_values: policy.replay_values.clone(),
        }
    }

    /// Whether an upstream answer of this status frees the key
    /// (`release_statuses`: codes, and the classes "4xx" / "5xx").
    pub fn releases(&self, status: u16) -> bool {
        self.release_statuses.contains(&status)
            || self
                .release_classes
                .iter()
                .any(|class| class.contains(status))
    }

    pub fn applies_to(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }
}

/// A scope part's label in the scope hash (`crate::key::scope_hash`), as the
/// config writes it: `header:authorization`, `client_cert`. Changing it
/// changes every stored record's scope.
fn scope_label(part: &ScopePart) -> String {
    match part {
        ScopePart::Header(name) => format!("header:{name}"),
        ScopePart::ClientCert => "client_cert".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use http::header;

    use super::*;

    const CONFIG: &str = r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[defaults]
methods = ["post", "purge"]
scope = ["header:X-Tenant", "header:Authorization"]
fingerprint = ["body", "header:X-Region"]
replay_header = "X-Was-Replayed"
replay_exclude_headers = ["Set-Cookie", "X-Secret"]
release_statuses = [409, "5xx"]

[[routes]]
name = "all"
upstream = "api"
match = { path_prefix = "/" }
"#;

    #[test]
    fn the_parsed_model_as_it_is() {
        let config = crate::config::parse(CONFIG, Path::new("t.toml"), &|_| None).unwrap();
        let policy = RoutePolicy::new(&config.routes[0].policy, 1024);
        assert_eq!(policy.methods, [Method::POST, "PURGE".parse().unwrap()]);
        assert!(policy.applies_to(&"PURGE".parse().unwrap()));
        assert!(!policy.applies_to(&Method::PATCH));
        let labels: Vec<&str> = policy.scope.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["header:x-tenant", "header:authorization"]);
        assert_eq!(policy.scope[1].1, ScopePart::Header(header::AUTHORIZATION));
        assert_eq!(
            policy.fingerprint[1],
            FingerprintPart::Header(HeaderName::from_static("x-region"))
        );
        assert_eq!(policy.replay_header, "x-was-replayed");
        assert_eq!(
            policy.replay_exclude_headers,
            [header::SET_COOKIE, HeaderName::from_static("x-secret")]
        );
        assert!(policy.releases(409) && policy.releases(503) && !policy.releases(429));
        assert_eq!(policy.max_request_body, 1024);
    }

    /// The labels go into every record's scope hash: a change would part
    /// every stored key from its retries.
    #[test]
    fn scope_labels_as_the_config_writes_them() {
        assert_eq!(scope_label(&ScopePart::ClientCert), "client_cert");
        assert_eq!(
            scope_label(&ScopePart::Header(header::AUTHORIZATION)),
            "header:authorization"
        );
    }
}

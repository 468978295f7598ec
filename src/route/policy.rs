use std::time::Duration;

use http::{HeaderName, Method};

use crate::config::{
    FingerprintBody, FingerprintPart, InFlightMode, KeyPattern, KeySource, Policy, ReplayValues,
    ScopePart, StatusClass, StoreErrorMode,
};

/// One part of the scope hash.
#[derive(Debug, Clone)]
pub enum ScopeSource {
    Header(HeaderName),
    ClientCert,
}

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
    pub scope: Vec<(String, ScopeSource)>,
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
        let scope = policy
            .scope
            .iter()
            .map(|part| match part {
                ScopePart::Header(name) => {
                    (format!("header:{name}"), ScopeSource::Header(name.clone()))
                }
                ScopePart::ClientCert => ("client_cert".to_string(), ScopeSource::ClientCert),
            })
            .collect();
        Self {
            methods: policy.methods.clone(),
            key: policy.key.clone(),
            required: policy.required,
            retention: policy.retention,
            lock_timeout: policy.lock_timeout,
            on_in_flight: policy.on_in_flight,
            wait_timeout: policy.wait_timeout,
            scope,
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

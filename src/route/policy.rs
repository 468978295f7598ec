//! A route's idempotency policy as the request path reads it: the file's
//! (`config::Policy`, every field with its default applied), and what the
//! path needs beside it.

use std::ops::Deref;

use crate::config::{Policy, ScopePart};

/// The effective idempotency policy of a route: its fields are the file's
/// (read through `Deref`), with the labels its scope parts are hashed under
/// made once and the body limit of a keyed request.
#[derive(Debug, Clone)]
pub struct RoutePolicy {
    policy: Policy,
    /// Each scope part's label in the scope hash, in configured order.
    scope_labels: Vec<String>,
    pub max_request_body: u64,
}

impl RoutePolicy {
    pub fn new(policy: &Policy, max_request_body: u64) -> Self {
        Self {
            scope_labels: policy.scope.iter().map(ToString::to_string).collect(),
            policy: policy.clone(),
            max_request_body,
        }
    }

    /// Label and source of each scope part, in configured order
    /// (`crate::key::scope_hash`).
    pub fn scope_parts(&self) -> impl Iterator<Item = (&str, &ScopePart)> {
        (self.scope_labels.iter().map(String::as_str)).zip(&self.policy.scope)
    }
}

impl Deref for RoutePolicy {
    type Target = Policy;

    fn deref(&self) -> &Policy {
        &self.policy
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use http::{HeaderName, Method, header};

    use super::*;
    use crate::config::FingerprintPart;

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
    fn the_files_policy_with_its_scope_labels() {
        let config = crate::config::parse(CONFIG, Path::new("t.toml"), &|_| None).unwrap();
        let policy = RoutePolicy::new(&config.routes[0].policy, 1024);
        assert_eq!(policy.methods, [Method::POST, "PURGE".parse().unwrap()]);
        assert!(policy.applies_to(&"PURGE".parse().unwrap()));
        assert!(!policy.applies_to(&Method::PATCH));
        // The labels go into every record's scope hash: a change would part
        // every stored key from its retries.
        let parts: Vec<(&str, &ScopePart)> = policy.scope_parts().collect();
        assert_eq!(
            parts,
            [
                (
                    "header:x-tenant",
                    &ScopePart::Header(HeaderName::from_static("x-tenant"))
                ),
                (
                    "header:authorization",
                    &ScopePart::Header(header::AUTHORIZATION)
                ),
            ]
        );
        assert_eq!(ScopePart::ClientCert.to_string(), "client_cert");
        assert_eq!(
            policy.fingerprint[1],
            FingerprintPart::Header(HeaderName::from_static("x-region"))
        );
        assert_eq!(policy.replay_header.name(), "x-was-replayed");
        assert_eq!(
            policy.replay_exclude_headers,
            [header::SET_COOKIE, HeaderName::from_static("x-secret")]
        );
        assert!(policy.releases(409) && policy.releases(503) && !policy.releases(429));
        assert_eq!(policy.max_request_body, 1024);
    }
}

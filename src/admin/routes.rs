//! `GET /admin/routes`: every route of the running config as operators tune
//! it: its match, upstream, effective policy (the fields of the config file,
//! defaults applied, as members of the route's object beside its name) and
//! how old its records were when replayed since the process started.

use http::{HeaderName, Method};
use serde_json::{Value, json};

use crate::config::{
    Config, InFlightMode, KeySource, Policy, RouteConfig, RouteMatch, StoreErrorMode, WebhookConfig,
};
use crate::key::FingerprintBody;
use crate::metrics::ReplayAges;

pub fn to_json(config: &Config, ages: &ReplayAges) -> Value {
    Value::Array(
        config
            .routes
            .iter()
            .map(|route| route_json(route, ages))
            .collect(),
    )
}

fn route_json(route: &RouteConfig, ages: &ReplayAges) -> Value {
    let quantiles = ages.quantiles(&route.name);
    let mut object = json!({
        "name": route.name,
        "match": match_json(&route.matcher),
        "upstream": route.upstream,
        "idempotency": route.idempotency,
        "preserve_host": route.preserve_host,
        "webhook": route.webhook.as_ref().map(webhook_json),
        "replay_age": {
            "count": quantiles.count,
            "p50": quantiles.p50,
            "p99": quantiles.p99,
            "p999": quantiles.p999,
            "max": quantiles.max,
        },
    });
    // The policy's fields sit beside the route's own: no name is shared.
    if let (Value::Object(object), Value::Object(policy)) =
        (&mut object, policy_json(&route.policy))
    {
        object.extend(policy);
    }
    object
}

/// As the file writes it: only the members it has.
fn match_json(matcher: &RouteMatch) -> Value {
    let mut object = serde_json::Map::new();
    if let Some(path) = &matcher.path {
        object.insert("path".into(), json!(path));
    }
    if let Some(prefix) = &matcher.path_prefix {
        object.insert("path_prefix".into(), json!(prefix));
    }
    if let Some(methods) = &matcher.methods {
        object.insert("methods".into(), json!(method_names(methods)));
    }
    Value::Object(object)
}

/// Durations in seconds (fractions kept), names as in the config file.
/// Every field is named (no `..`): a new policy field does not compile
/// until it is shown here too.
fn policy_json(policy: &Policy) -> Value {
    let Policy {
        methods,
        key,
        required,
        retention,
        lock_timeout,
        on_in_flight,
        wait_timeout,
        scope,
        fingerprint,
        canonical_json,
        release_statuses,
        forward_key,
        replay_header,
        replay_exclude_headers,
        on_store_error,
        max_in_flight,
        key_pattern,
        fingerprint_body,
        canonical_form,
        release_classes,
        expiry_header,
        replay_headers,
        replay_values,
    } = policy;
    json!({
        "methods": method_names(methods),
        "key": key.iter().map(key_json).collect::<Vec<_>>(),
        "key_pattern": key_pattern.as_ref().map(|pattern| pattern.as_str()),
        "required": required,
        "retention": retention.as_secs_f64(),
        "lock_timeout": lock_timeout.as_secs_f64(),
        "on_in_flight": match on_in_flight {
            InFlightMode::Conflict => "conflict",
            InFlightMode::Wait => "wait",
        },
        "wait_timeout": wait_timeout.as_secs_f64(),
        "scope": scope.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "fingerprint": fingerprint.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "canonical_json": canonical_json,
        "fingerprint_body": match fingerprint_body {
            FingerprintBody::Whole => Value::Null,
            FingerprintBody::Exclude(pointers) => json!({ "exclude": pointers.as_written() }),
            FingerprintBody::Include(pointers) => json!({ "include": pointers.as_written() }),
        },
        "canonical_form": canonical_form,
        // One list, as the file writes it: classes first, then statuses, the
        // order of a webhook route's default `["5xx", 429]`.
        "release_statuses": release_classes
            .iter()
            .map(|class| json!(class.as_str()))
            .chain(release_statuses.iter().map(|status| json!(status)))
            .collect::<Vec<_>>(),
        "forward_key": forward_key,
        "replay_header": replay_header.as_written(),
        "replay_exclude_headers": header_names(replay_exclude_headers),
        "replay_headers": header_names(replay_headers),
        "replay_values": [
            String::from_utf8_lossy(replay_values.fresh.as_bytes()),
            String::from_utf8_lossy(replay_values.replayed.as_bytes()),
        ],
        "expiry_header": expiry_header.as_ref().map(|name| name.as_str()),
        "on_store_error": match on_store_error {
            StoreErrorMode::Reject => "reject",
            StoreErrorMode::Pass => "pass",
        },
        "max_in_flight": max_in_flight,
    })
}

fn method_names(methods: &[Method]) -> Vec<&str> {
    methods.iter().map(Method::as_str).collect()
}

fn header_names(names: &[HeaderName]) -> Vec<&str> {
    names.iter().map(HeaderName::as_str).collect()
}

/// One key source as the config file writes it.
fn key_json(source: &KeySource) -> Value {
    match source {
        KeySource::Header(name) => json!({ "header": name.as_str() }),
        KeySource::JsonPointer(pointer) => json!({ "json_pointer": pointer }),
        KeySource::Query(name) => json!({ "query": name }),
        KeySource::FormField(name) => json!({ "form_field": name }),
        KeySource::Derive(derive) => json!({
            "derive": derive.parts.iter().map(|part| part.describe()).collect::<Vec<_>>(),
            "namespace": derive.namespace.to_string(),
        }),
    }
}

/// The scheme, the variables the secrets come from and the tolerance;
/// never a secret.
fn webhook_json(webhook: &WebhookConfig) -> Value {
    json!({
        "scheme": webhook.scheme.as_str(),
        "secrets_env": webhook.secrets.iter().map(|secret| secret.env.as_str()).collect::<Vec<_>>(),
        "tolerance": webhook.scheme.has_timestamp().then_some(webhook.tolerance.as_secs_f64()),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use prometheus::{HistogramOpts, HistogramVec};
    use serde_json::json;

    use super::*;

    use crate::config::every_policy_field::CONFIG;

    fn routes(text: &str) -> Vec<Value> {
        let config = crate::config::parse(text, Path::new("t.toml"), &|_| None).unwrap();
        let histogram = HistogramVec::new(HistogramOpts::new("ages", "ages"), &["route"]).unwrap();
        let Value::Array(routes) = to_json(&config, &ReplayAges::new(histogram)) else {
            panic!("not a list")
        };
        routes
    }

    /// Every policy field is a member of the route's object, and nothing
    /// else is there but the route's own members.
    fn assert_policy(route: &Value, policy: &Value) {
        let (Value::Object(route), Value::Object(policy)) = (route, policy) else {
            panic!("not objects")
        };
        for (name, value) in policy {
            assert_eq!(route.get(name), Some(value), "{name}");
        }
        let own = [
            "name",
            "match",
            "upstream",
            "idempotency",
            "preserve_host",
            "webhook",
            "replay_age",
        ];
        for name in route.keys() {
            assert!(
                policy.contains_key(name) || own.contains(&name.as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn every_policy_field_as_the_file_names_it() {
        let routes = routes(CONFIG);
        assert_eq!(
            routes[0]["match"],
            json!({ "path_prefix": "/v1/orders", "methods": ["POST", "PURGE"] })
        );
        assert_eq!(routes[1]["match"], json!({ "path": "/health" }));
        assert_eq!(routes[1]["idempotency"], false);
        let policy = json!({
            "methods": ["POST", "PUT", "PURGE"],
            "key": [
                { "header": "x-key" },
                {
                    "derive": ["/id", "header:x-customer"],
                    "namespace": "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
                },
            ],
            "key_pattern": "ord_[0-9]+",
            "required": true,
            "retention": 5400.0,
            "lock_timeout": 120.0,
            "on_in_flight": "wait",
            "wait_timeout": 1.5,
            "scope": ["header:x-tenant", "header:authorization"],
            "fingerprint": ["method", "path", "header:x-region", "body"],
            "canonical_json": true,
            "fingerprint_body": { "exclude": ["/sent_at"] },
            "canonical_form": true,
            "release_statuses": ["5xx", 409],
            "forward_key": false,
            "replay_header": "X-Was-Replayed",
            "replay_exclude_headers": ["set-cookie", "x-secret"],
            "replay_headers": ["location", "etag"],
            "replay_values": ["no", "yes"],
            "expiry_header": "idempotency-expires",
            "on_store_error": "pass",
            "max_in_flight": 8,
        });
        assert_policy(&routes[0], &policy);
        // A pass-through route still shows the policy it would have.
        assert_policy(&routes[1], &policy);
    }

    #[test]
    fn the_built_in_policy() {
        let text = CONFIG.split("[defaults]").next().unwrap().to_owned()
            + "[[routes]]\nname = \"all\"\nupstream = \"api\"\nmatch = { path_prefix = \"/\" }\n";
        let routes = routes(&text);
        let policy = json!({
            "methods": ["POST", "PATCH"],
            "key": [{ "header": "idempotency-key" }],
            "key_pattern": null,
            "required": false,
            "retention": 86400.0,
            "lock_timeout": 60.0,
            "on_in_flight": "conflict",
            "wait_timeout": 10.0,
            "scope": ["header:authorization"],
            "fingerprint": ["method", "path", "query", "body"],
            "canonical_json": false,
            "fingerprint_body": null,
            "canonical_form": false,
            "release_statuses": [429, 503],
            "forward_key": true,
            "replay_header": "Idempotent-Replayed",
            "replay_exclude_headers": ["set-cookie"],
            "replay_headers": [],
            "replay_values": ["false", "true"],
            "expiry_header": null,
            "on_store_error": "reject",
            "max_in_flight": 0,
        });
        assert_policy(&routes[0], &policy);
        assert_eq!(routes[0]["match"], json!({ "path_prefix": "/" }));
    }
}

//! `GET /admin/routes`: every route of the running config as operators tune
//! it: its match, upstream, effective policy (the fields of the config file,
//! defaults applied) and how old its records were when replayed since the
//! process started.

use serde_json::{Value, json};

use crate::config::{
    Config, FingerprintPart, InFlightMode, KeySource, Policy, RouteConfig, ScopePart,
    StoreErrorMode, WebhookConfig,
};
use crate::key::FingerprintBody;
use crate::retention::ReplayAges;

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
    let matcher = &route.matcher;
    let quantiles = ages.quantiles(&route.name);
    json!({
        "name": route.name,
        "match": {
            "path": matcher.path,
            "path_prefix": matcher.path_prefix,
            "methods": matcher.methods,
        },
        "upstream": route.upstream,
        "idempotency": route.idempotency,
        "preserve_host": route.preserve_host,
        "policy": policy_json(&route.policy),
        "webhook": route.webhook.as_ref().map(webhook_json),
        "replay_age": {
            "count": quantiles.count,
            "p50": quantiles.p50,
            "p99": quantiles.p99,
            "p999": quantiles.p999,
            "max": quantiles.max,
        },
    })
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
        "methods": methods,
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
        "scope": scope.iter().map(|part| match part {
            ScopePart::Header(name) => format!("header:{name}"),
            ScopePart::ClientCert => "client_cert".to_owned(),
        }).collect::<Vec<_>>(),
        "fingerprint": fingerprint.iter().map(|part| match part {
            FingerprintPart::Method => "method".to_owned(),
            FingerprintPart::Path => "path".to_owned(),
            FingerprintPart::Query => "query".to_owned(),
            FingerprintPart::Body => "body".to_owned(),
            FingerprintPart::Header(name) => format!("header:{name}"),
        }).collect::<Vec<_>>(),
        "canonical_json": canonical_json,
        "fingerprint_body": match fingerprint_body {
            FingerprintBody::Whole => Value::Null,
            FingerprintBody::Exclude(pointers) => json!({ "exclude": pointers.as_written() }),
            FingerprintBody::Include(pointers) => json!({ "include": pointers.as_written() }),
        },
        "canonical_form": canonical_form,
        // As the file writes them: statuses and classes in one list.
        "release_statuses": release_statuses
            .iter()
            .map(|status| json!(status))
            .chain(release_classes.iter().map(|class| json!(class.as_str())))
            .collect::<Vec<_>>(),
        "forward_key": forward_key,
        "replay_header": replay_header,
        "replay_exclude_headers": replay_exclude_headers,
        "replay_headers": replay_headers.iter().map(|name| name.as_str()).collect::<Vec<_>>(),
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

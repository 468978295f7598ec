//! The summary `idemgate check` prints: each route's match, upstream and
//! effective policy, the regions, which tokens `/admin/*` accepts, the
//! store, then the warnings. Secrets never appear in it.

use std::fmt::Write;

use http::Method;

use super::units::format_duration;
use super::{Config, InFlightMode, KeySource, Policy, RouteConfig, RouteMatch, StoreErrorMode};

pub fn describe(config: &Config) -> String {
    let mut out = String::new();
    for route in &config.routes {
        route_block(&mut out, config, route);
    }
    if let Some(region) = &config.region {
        regions_block(&mut out, region);
    }
    admin_line(&mut out, &config.admin);
    store_line(&mut out, &config.store);
    for warning in &config.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// This region, where the token comes from (never the token), and every
/// region's gateway.
fn regions_block(out: &mut String, region: &super::RegionsConfig) {
    let _ = writeln!(
        out,
        "region {} (token from {})",
        region.name, region.token_env
    );
    for peer in region.peers.values() {
        let this = if peer.name == region.name {
            ", this region"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:<9} {} connect_timeout {}, timeout {}{}{this}",
            peer.name,
            peer.gateway,
            format_duration(peer.connect_timeout),
            format_duration(peer.timeout),
            if peer.http2 { ", http2" } else { "" },
        );
    }
}

/// Where the tokens `/admin/*` accepts come from (never a token), and the
/// listed variables holding none: `/admin/*` is disabled when none does.
fn admin_line(out: &mut String, admin: &super::AdminConfig) {
    let without = admin.variables_without_token();
    let line = match (admin.tokens.is_empty(), admin.token_env.is_empty()) {
        (true, true) => "disabled (404): neither admin.token_env nor admin.token is set".to_owned(),
        (true, false) => format!("disabled (404): no token in {}", without.join(", ")),
        (false, true) => "token inline (admin.token)".to_owned(),
        (false, false) => {
            let from: Vec<&str> = (admin.tokens.iter())
                .filter_map(|token| match &token.source {
                    super::TokenSource::Env(name) => Some(name.as_str()),
                    super::TokenSource::Inline => None,
                })
                .collect();
            let from = match from.as_slice() {
                [one] => format!("token from {one}"),
                several => format!("tokens from {} (any one is accepted)", several.join(", ")),
            };
            match without.as_slice() {
                [] => from,
                names => format!("{from}; no token in {}", names.join(", ")),
            }
        }
    };
    let _ = writeln!(out, "admin     {line}");
}

/// Which store, and whether answers are sealed and with the key of which
/// variable (never a key, nor a URL: it may hold a password).
fn store_line(out: &mut String, store: &super::StoreConfig) {
    let (what, keys) = match store {
        super::StoreConfig::Embedded(embedded) => {
            let durability = match embedded.durability {
                super::Durability::PowerLoss => "power_loss",
                super::Durability::ProcessCrash => "process_crash",
            };
            let what = format!(
                "embedded {}, durability {durability}",
                embedded.path.display()
            );
            (what, &embedded.encryption)
        }
        super::StoreConfig::Postgres(postgres) => {
            let mut what = format!("postgres, pool_size {}", postgres.pool_size);
            if let Some(redis) = &postgres.redis {
                let _ = write!(what, ", redis cache (key_prefix {:?})", redis.key_prefix);
            }
            (what, &postgres.encryption)
        }
    };
    let sealed = match keys.split_first() {
        None => "answers stored clear".to_owned(),
        Some((first, [])) => format!("answers sealed with the key in {}", first.env),
        Some((first, others)) => {
            let others: Vec<&str> = others.iter().map(|key| key.env.as_str()).collect();
            format!(
                "answers sealed with the key in {}, opened with {} too",
                first.env,
                others.join(", ")
            )
        }
    };
    let _ = writeln!(out, "store     {what}; {sealed}");
}

fn route_block(out: &mut String, config: &Config, route: &RouteConfig) {
    let upstream = config
        .upstreams
        .get(&route.upstream)
        .map_or(String::new(), |u| {
            // Only the exception is spelled out, as for Host below.
            let once = if u.keep_alive {
                ""
            } else {
                ", a connection per request"
            };
            format!(" ({}{once})", u.url)
        });
    let _ = writeln!(out, "route {}", route.name);
    let _ = writeln!(out, "  match     {}", matcher(&route.matcher));
    // The client's Host goes on unless the route says otherwise: only the
    // exception is spelled out.
    let host = if route.preserve_host {
        ""
    } else {
        ", Host: the upstream's"
    };
    let _ = writeln!(out, "  upstream  {}{upstream}{host}", route.upstream);
    if let Some(webhook) = &route.webhook {
        webhook_line(out, webhook);
    }
    if route.idempotency {
        policy(out, &route.policy);
    } else {
        let _ = writeln!(out, "  policy    pass-through");
    }
}

/// The scheme, the variables the secrets come from (never the secrets) and,
/// where the scheme signs a timestamp, the tolerance.
fn webhook_line(out: &mut String, webhook: &super::WebhookConfig) {
    let variables: Vec<&str> = webhook.secrets.iter().map(|s| s.env.as_str()).collect();
    let tolerance = match webhook.scheme.has_timestamp() {
        true => format!(", tolerance {}", format_duration(webhook.tolerance)),
        false => String::new(),
    };
    let _ = writeln!(
        out,
        "  webhook   {}, secrets from {}{tolerance}",
        webhook.scheme.as_str(),
        variables.join(",")
    );
}

fn matcher(matcher: &RouteMatch) -> String {
    let path = match (&matcher.path, &matcher.path_prefix) {
        (Some(path), _) => format!("path {path}"),
        (None, Some(prefix)) => format!("path_prefix {prefix}"),
        (None, None) => String::new(),
    };
    match &matcher.methods {
        Some(methods) => format!("{path} methods {}", method_list(methods)),
        None => format!("{path} any method"),
    }
}

fn policy(out: &mut String, policy: &Policy) {
    let key = policy
        .key
        .iter()
        .map(KeySource::describe)
        .collect::<Vec<_>>()
        .join(", else ");
    let in_flight = match policy.on_in_flight {
        InFlightMode::Conflict => "conflict".to_owned(),
        InFlightMode::Wait => format!("wait {}", format_duration(policy.wait_timeout)),
    };
    let on_store_error = match policy.on_store_error {
        StoreErrorMode::Reject => "reject",
        StoreErrorMode::Pass => "pass",
    };
    // Codes and classes on one line, as the field lists them together.
    let statuses: Vec<String> = policy
        .release_statuses
        .iter()
        .map(u16::to_string)
        .chain(policy.release_classes.iter().map(|c| c.as_str().to_owned()))
        .collect();
    let lines = [
        ("methods", method_list(&policy.methods)),
        (
            "key",
            format!(
                "{key}, {}",
                if policy.required {
                    "required"
                } else {
                    "optional"
                }
            ),
        ),
        (
            "retention",
            format!(
                "{}, lock_timeout {}",
                format_duration(policy.retention),
                format_duration(policy.lock_timeout)
            ),
        ),
        ("in-flight", in_flight),
        ("scope", list(policy.scope.iter().map(ToString::to_string))),
        (
            "fingerprint",
            list(policy.fingerprint.iter().map(ToString::to_string)),
        ),
        ("canonical_json", policy.canonical_json.to_string()),
        ("release", list(statuses.into_iter())),
        ("store error", on_store_error.to_owned()),
        ("forward key", policy.forward_key.to_string()),
        (
            "replay header",
            policy.replay_header.as_written().to_owned(),
        ),
        (
            "replay exclude",
            list(
                policy
                    .replay_exclude_headers
                    .iter()
                    .map(ToString::to_string),
            ),
        ),
        (
            "max in-flight",
            match policy.max_in_flight {
                0 => "no limit".to_owned(),
                n => n.to_string(),
            },
        ),
    ];
    let _ = writeln!(out, "  policy    idempotent");
    for (name, value) in lines.into_iter().chain(key_and_fingerprint_lines(policy)) {
        let _ = writeln!(out, "    {name:<15}{value}");
    }
}

/// The key and fingerprint options, each only when it is not the default, so
/// the summary of a config that does not use them stays short.
fn key_and_fingerprint_lines(policy: &Policy) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(pattern) = &policy.key_pattern {
        lines.push(("key pattern", format!("{:?}", pattern.as_str())));
    }
    match &policy.fingerprint_body {
        crate::key::FingerprintBody::Whole => {}
        crate::key::FingerprintBody::Exclude(pointers) => {
            lines.push(("body exclude", list(pointers.as_written().iter().cloned())));
        }
        crate::key::FingerprintBody::Include(pointers) => {
            lines.push(("body include", list(pointers.as_written().iter().cloned())));
        }
    }
    if policy.canonical_form {
        lines.push(("canonical_form", "true".to_owned()));
    }
    if let Some(name) = &policy.expiry_header {
        lines.push(("expiry header", name.to_string()));
    }
    if !policy.replay_headers.is_empty() {
        let names = policy.replay_headers.iter().map(ToString::to_string);
        lines.push(("replay only", list(names)));
    }
    if policy.replay_values != crate::config::ReplayValues::default() {
        let value = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
        lines.push((
            "replay values",
            format!(
                "{} (fresh), {} (replayed)",
                value(&policy.replay_values.fresh),
                value(&policy.replay_values.replayed)
            ),
        ));
    }
    lines
}

/// `POST,PUT`: as `check` and the config's warnings write methods.
pub(super) fn method_list(methods: &[Method]) -> String {
    let names: Vec<&str> = methods.iter().map(Method::as_str).collect();
    names.join(",")
}

fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "(none)".to_owned()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::every_policy_field::CONFIG;

    #[test]
    fn every_policy_line() {
        let config = crate::config::parse(CONFIG, Path::new("t.toml"), &|_| None).unwrap();
        let shown = super::describe(&config);
        let expected = r#"route orders
  match     path_prefix /v1/orders methods POST,PURGE
  upstream  api (http://127.0.0.1:3000)
  policy    idempotent
    methods        POST,PUT,PURGE
    key            header x-key, else derive [/id,header:x-customer] namespace 6ba7b811-9dad-11d1-80b4-00c04fd430c8, required
    retention      90m, lock_timeout 2m
    in-flight      wait 1500ms
    scope          header:x-tenant,header:authorization
    fingerprint    method,path,header:x-region,body
    canonical_json true
    release        409,5xx
    store error    pass
    forward key    false
    replay header  X-Was-Replayed
    replay exclude set-cookie,x-secret
    max in-flight  8
    key pattern    "ord_[0-9]+"
    body exclude   /sent_at
    canonical_form true
    expiry header  idempotency-expires
    replay only    location,etag
    replay values  no (fresh), yes (replayed)
route health
  match     path /health any method
  upstream  api (http://127.0.0.1:3000)
  policy    pass-through
admin     disabled (404): neither admin.token_env nor admin.token is set
store     embedded data/idemgate.db, durability power_loss; answers stored clear
"#;
        assert_eq!(shown, expected, "\n{shown}");
    }

    #[test]
    fn the_store_line_names_variables_never_keys_or_urls() {
        let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
        let old = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
        let env = |name: &str| match name {
            "PG_URL" => Some("postgres://idem:hunter2@db/idem".to_owned()),
            "KEY_NEW" => Some(key.to_owned()),
            "KEY_OLD" => Some(old.to_owned()),
            _ => None,
        };
        let postgres = r#"
[store]
backend = "postgres"
url_env = "PG_URL"
pool_size = 8
[store.redis]
url = "redis://:sesame@cache:6379"
key_prefix = "eu:"
[store.encryption]
keys_env = ["KEY_NEW", "KEY_OLD"]
[upstreams.api]
url = "http://127.0.0.1:3000"
[[routes]]
name = "r"
upstream = "api"
match = { path_prefix = "/" }
"#;
        let config = crate::config::parse(postgres, Path::new("t.toml"), &env).unwrap();
        let shown = super::describe(&config);
        assert!(
            shown.contains(
                "store     postgres, pool_size 8, redis cache (key_prefix \"eu:\"); answers \
                 sealed with the key in KEY_NEW, opened with KEY_OLD too\n"
            ),
            "{shown}"
        );
        for secret in ["hunter2", "sesame", key, old] {
            assert!(!shown.contains(secret), "{shown}");
        }
        let embedded = postgres
            .replace(
                "backend = \"postgres\"\nurl_env = \"PG_URL\"\npool_size = 8\n",
                "",
            )
            .replace(
                "[store.redis]\nurl = \"redis://:sesame@cache:6379\"\nkey_prefix = \"eu:\"\n",
                "",
            )
            .replace("[\"KEY_NEW\", \"KEY_OLD\"]", "[\"KEY_NEW\"]")
            .replace(
                "[store]\n",
                "[store]\npath = \"s.db\"\ndurability = \"process_crash\"\n",
            );
        let config = crate::config::parse(&embedded, Path::new("t.toml"), &env).unwrap();
        let shown = super::describe(&config);
        assert!(
            shown.contains(
                "store     embedded s.db, durability process_crash; answers sealed with the key \
                 in KEY_NEW\n"
            ),
            "{shown}"
        );
    }
}

//! Whole-file tests: defaults, inheritance, every collected error with its line.

use std::path::Path;
use std::time::Duration;

use http::{HeaderName, Method, header};

use super::test_support::{errors, errors_with, ok, single};
use crate::config::{
    Durability, FingerprintPart, InFlightMode, KeySource, ScopePart, StoreConfig, StoreErrorMode,
    describe, parse,
};

const MINIMAL: &str = crate::config::ONE_ROUTE;

#[test]
fn server_defaults() {
    let server = ok(MINIMAL).server;
    assert_eq!(server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(server.admin_listen.to_string(), "127.0.0.1:9090");
    assert_eq!(server.max_request_body, 1 << 20);
    assert_eq!(server.max_stored_response, 4 << 20);
    assert_eq!(server.max_header_bytes, 32 << 10);
    assert_eq!(server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(server.body_read_timeout, Duration::from_secs(60));
    assert_eq!(server.max_connections, 10_000);
    assert_eq!(server.shutdown_grace, Duration::from_secs(30));
    assert_eq!(server.tls, None);
}

#[test]
fn store_admin_upstream_defaults() {
    let config = ok(MINIMAL);
    let StoreConfig::Embedded(store) = config.store else {
        panic!("not embedded")
    };
    assert_eq!(store.path, Path::new("data/idemgate.db"));
    assert_eq!(store.sweep_interval, Duration::from_secs(60));
    assert_eq!(store.sweep_batch, 1000);
    assert_eq!(store.durability, Durability::PowerLoss);
    assert!(config.admin.token_env.is_empty());
    assert!(config.admin.tokens.is_empty());
    let api = &config.upstreams["api"];
    assert_eq!(api.connect_timeout, Duration::from_secs(2));
    assert_eq!(api.timeout, Duration::from_secs(30));
    assert!(!api.http2);
    assert_eq!(api.max_connections, 256);
    assert_eq!(api.tls, None);
    let route = &config.routes[0];
    assert!(route.idempotency);
    assert!(route.preserve_host);
    assert_eq!(route.matcher.methods, None);
}

#[test]
fn policy_defaults() {
    let policy = ok(MINIMAL).routes[0].policy.clone();
    assert_eq!(policy.methods, ["POST", "PATCH"]);
    assert_eq!(
        policy.key,
        [KeySource::Header(http::HeaderName::from_static(
            "idempotency-key"
        ))]
    );
    assert!(!policy.required);
    assert_eq!(policy.retention, Duration::from_secs(86_400));
    assert_eq!(policy.lock_timeout, Duration::from_secs(60));
    assert_eq!(policy.on_in_flight, InFlightMode::Conflict);
    assert_eq!(policy.wait_timeout, Duration::from_secs(10));
    assert_eq!(policy.scope, [ScopePart::Header(header::AUTHORIZATION)]);
    assert_eq!(
        policy.fingerprint,
        [
            FingerprintPart::Method,
            FingerprintPart::Path,
            FingerprintPart::Query,
            FingerprintPart::Body
        ]
    );
    assert!(!policy.canonical_json);
    assert_eq!(policy.release_statuses, [429, 503]);
    assert!(policy.forward_key);
    assert_eq!(policy.replay_header.as_written(), "Idempotent-Replayed");
    assert_eq!(policy.replay_header.name(), "idempotent-replayed");
    assert_eq!(policy.replay_exclude_headers, [header::SET_COOKIE]);
    assert_eq!(policy.on_store_error, StoreErrorMode::Reject);
}

#[test]
fn postgres_defaults_and_url_env() {
    let text = format!("[store]\nbackend = \"postgres\"\nurl_env = \"DB\"\n{MINIMAL}");
    let env = |name: &str| (name == "DB").then(|| "postgres://u@h/db".to_owned());
    let config = parse(&text, Path::new("t.toml"), &env).expect("valid");
    let StoreConfig::Postgres(pg) = config.store else {
        panic!("not postgres")
    };
    assert_eq!(pg.url, "postgres://u@h/db");
    assert_eq!(pg.pool_size, 16);
    assert_eq!(pg.connect_timeout, Duration::from_secs(5));
    assert_eq!(pg.statement_timeout, Duration::from_secs(5));
    assert!(pg.migrate);
    assert_eq!(pg.redis, None);
}

#[test]
fn unset_url_env_is_an_error_naming_the_field() {
    let text = format!("[store]\nbackend = \"postgres\"\nurl_env = \"DB\"\n{MINIMAL}");
    let errors = errors_with(&text, &|_| None);
    assert_eq!(
        errors,
        ["t.toml:3:11: store.url_env: environment variable DB is not set or empty"]
    );
    let errors = errors_with(&text, &|_| Some(String::new()));
    assert_eq!(errors.len(), 1, "{errors:?}");
    // From a secret file, with its newline.
    let config = parse(&text, Path::new("t.toml"), &|_| {
        Some("postgres://u@h/db\n".into())
    })
    .expect("valid");
    let StoreConfig::Postgres(pg) = config.store else {
        panic!("not postgres")
    };
    assert_eq!(pg.url, "postgres://u@h/db");
}

#[test]
fn postgres_needs_exactly_one_url() {
    let text = format!("[store]\nbackend = \"postgres\"\n{MINIMAL}");
    single(
        &text,
        "t.toml:2:11: store.url:",
        "url or url_env is required",
    );
    let text = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://h\"\nurl_env = \"DB\"\n{MINIMAL}"
    );
    single(&text, "t.toml:3:7: store.url:", "not both");
}

#[test]
fn redis_url_env_and_default_prefix() {
    let text = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\n[store.redis]\nurl_env = \"R\"\n{MINIMAL}"
    );
    let env = |name: &str| (name == "R").then(|| "redis://cache:6379".to_owned());
    let config = parse(&text, Path::new("t.toml"), &env).expect("valid");
    let StoreConfig::Postgres(pg) = config.store else {
        panic!("not postgres")
    };
    let redis = pg.redis.expect("redis");
    assert_eq!(redis.url, "redis://cache:6379");
    assert_eq!(redis.key_prefix, "idemgate:");
    let errors = errors_with(&text, &|_| None);
    assert_eq!(
        errors,
        ["t.toml:5:11: store.redis.url_env: environment variable R is not set or empty"]
    );
}

#[test]
fn embedded_durability_is_chosen_by_name_and_only_for_the_embedded_store() {
    let text = format!("[store]\ndurability = \"process_crash\"\n{MINIMAL}");
    let StoreConfig::Embedded(store) = ok(&text).store else {
        panic!("embedded store expected");
    };
    assert_eq!(store.durability, Durability::ProcessCrash);

    let text = format!("[store]\ndurability = \"fsync\"\n{MINIMAL}");
    single(
        &text,
        "t.toml:2:14: store.durability:",
        "\"fsync\" is not \"power_loss\" or \"process_crash\"",
    );
    let text = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/db\"\ndurability = \"power_loss\"\n{MINIMAL}"
    );
    single(
        &text,
        "t.toml:4:14: store.durability:",
        "only allowed with backend = \"embedded\"",
    );
}

#[test]
fn redis_only_with_postgres() {
    let text = format!("[store.redis]\nurl = \"redis://h\"\n{MINIMAL}");
    single(&text, "t.toml:1:1: store.redis:", "backend = \"postgres\"");
}

#[test]
fn defaults_inherit_and_routes_override() {
    let text = r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[defaults]
methods = ["post", "PUT"]
scope = ["header:X-Tenant", "client_cert"]
retention = "12h"
release_statuses = [503]

[server.tls]
cert = "c.pem"
key = "k.pem"
client_ca = "ca.pem"

[[routes]]
name = "a"
upstream = "api"
match = { path = "/a" }

[[routes]]
name = "b"
upstream = "api"
match = { path = "/b", methods = ["delete"] }
scope = []
methods = ["DELETE"]
retention = "500ms"
key = { json_pointer = "/id" }
"#;
    let config = ok(text);
    let a = &config.routes[0].policy;
    assert_eq!(a.methods, ["POST", "PUT"]);
    assert_eq!(
        a.scope,
        [
            ScopePart::Header(HeaderName::from_static("x-tenant")),
            ScopePart::ClientCert
        ]
    );
    assert_eq!(a.retention, Duration::from_secs(12 * 3600));
    assert_eq!(a.release_statuses, [503]);
    let b = &config.routes[1];
    assert_eq!(b.matcher.methods.as_deref(), Some(&[Method::DELETE][..]));
    assert_eq!(b.policy.methods, ["DELETE"]);
    assert_eq!(b.policy.scope, []);
    assert_eq!(b.policy.retention, Duration::from_millis(500));
    assert_eq!(b.policy.key, [KeySource::JsonPointer("/id".into())]);
    assert_eq!(b.policy.release_statuses, [503]);
}

#[test]
fn unknown_field_names_field_and_line() {
    let text = format!("{MINIMAL}retentoin = \"1h\"\n");
    single(
        &text,
        "t.toml:9:1: routes[0].retentoin:",
        "unknown field `retentoin`",
    );
    single(
        "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 1\n",
        "t.toml:3:1: server.lisen:",
        "unknown field",
    );
    // A table or key of the root is named by itself, not by the table
    // written before it.
    single(
        &format!("{MINIMAL}[foo]\nbar = 1\n"),
        "t.toml:9:2: foo:",
        "unknown field `foo`",
    );
    single(
        &format!("foo = 1\n{MINIMAL}"),
        "t.toml:1:1: foo:",
        "unknown field `foo`",
    );
    single(
        &format!("[server]\n[serer]\n{MINIMAL}"),
        "t.toml:2:2: serer:",
        "unknown field `serer`",
    );
}

/// A misspelt field is told the one it is closest to, before the whole list.
#[test]
fn a_misspelt_field_is_told_the_one_meant() {
    for (text, field, meant) in [
        (
            format!("{MINIMAL}retentoin = \"1h\"\n"),
            "retentoin",
            "retention",
        ),
        (format!("[serer]\n{MINIMAL}"), "serer", "server"),
        (
            format!("{MINIMAL}upsteam = \"api\"\n"),
            "upsteam",
            "upstream",
        ),
        (
            format!("[defaults]\nfingerprints = []\n{MINIMAL}"),
            "fingerprints",
            "fingerprint",
        ),
        (
            format!("[defaults]\nlock_timout = \"2m\"\n{MINIMAL}"),
            "lock_timout",
            "lock_timeout",
        ),
    ] {
        let errors = errors(&text);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let expected = format!("unknown field `{field}` (did you mean `{meant}`?), expected");
        assert!(errors[0].contains(&expected), "{}", errors[0]);
    }
    // Nothing close: no guess.
    let errors = errors(&format!("{MINIMAL}colour = \"red\"\n"));
    assert!(!errors[0].contains("did you mean"), "{}", errors[0]);
}

/// A `*_env` field written as a shell would expand it names no variable
/// anyone sets: refused with the name to write, in every such field.
#[test]
fn a_shell_expansion_is_no_variable_name() {
    single(
        &format!("[admin]\ntoken_env = \"$ADMIN_TOKEN\"\n{MINIMAL}"),
        "t.toml:2:13: admin.token_env:",
        "\"$ADMIN_TOKEN\" is a shell expansion, not a variable name: write the name alone, as in \"ADMIN_TOKEN\"",
    );
    single(
        &format!("[store]\nbackend = \"postgres\"\nurl_env = \"${{DB}}\"\n{MINIMAL}"),
        "t.toml:3:11: store.url_env:",
        "as in \"DB\"",
    );
    single(
        &format!("[store.encryption]\nkeys_env = [\"$K1\"]\n{MINIMAL}"),
        "t.toml:2:13: store.encryption.keys_env[0]:",
        "as in \"K1\"",
    );
}

/// A table written twice is named by itself, not by the table before it.
#[test]
fn a_table_written_twice_is_named() {
    single(
        &format!("[defaults]\nretention = \"1h\"\n[server]\n[defaults]\n{MINIMAL}"),
        "t.toml:4:2: defaults:",
        "duplicate key",
    );
    single(
        &format!("{MINIMAL}[upstreams.api]\nurl = \"http://127.0.0.1:3001\"\n"),
        "t.toml:9:12: upstreams.api:",
        "duplicate key",
    );
    single(
        &format!("[server]\nlisten = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n{MINIMAL}"),
        "t.toml:3:1: server.listen:",
        "duplicate key",
    );
}

/// toml names no entry of a list; the message does (`key[1]`).
#[test]
fn a_fault_inside_a_list_names_its_entry() {
    let text = MINIMAL.replace(
        "match = { path_prefix = \"/\" }",
        "match = { path_prefix = \"/\" }\nkey = [{ header = \"A\" }, { hedaer = \"B\" }]",
    );
    single(
        &text,
        "t.toml:9:28: routes[0].key[1].hedaer:",
        "unknown field `hedaer`",
    );
    single(
        &format!("[defaults]\nkey = [\n  {{ header = \"A\" }},\n  {{ header = 1 }},\n]\n{MINIMAL}"),
        "t.toml:4:14: defaults.key[1].header:",
        "expected a string",
    );
    single(
        &format!("[defaults]\nrelease_statuses = [429, true]\n{MINIMAL}"),
        "t.toml:2:26: defaults.release_statuses[1]:",
        "invalid type: boolean",
    );
}

#[test]
fn wrong_type_names_field_and_line() {
    single(
        &format!("[defaults]\nrequired = \"yes\"\n{MINIMAL}"),
        "t.toml:2:12: defaults.required:",
        "expected a boolean",
    );
    single(
        &format!("[server]\nmax_connections = \"many\"\n{MINIMAL}"),
        "t.toml:2:19: server.max_connections:",
        "expected an integer",
    );
    // In TOML's words, not serde's nor the names of our structs.
    let text = MINIMAL.replace("match = { path_prefix = \"/\" }", "match = \"/\"");
    single(
        &text,
        "t.toml:8:9: routes[0].match:",
        "invalid type: string \"/\", expected a table",
    );
    single(
        &format!("[defaults]\nscope = \"header:X\"\n{MINIMAL}"),
        "t.toml:2:9: defaults.scope:",
        "expected an array",
    );
    single(
        &format!("server = 5\n{MINIMAL}"),
        "t.toml:1:10: server:",
        "invalid type: integer `5`, expected a table",
    );
}

#[test]
fn upstream_max_connections_is_a_positive_count() {
    let config = ok(&MINIMAL.replace("url = ", "max_connections = 8\nurl = "));
    assert_eq!(config.upstreams["api"].max_connections, 8);
    single(
        &MINIMAL.replace("url = ", "max_connections = 0\nurl = "),
        "t.toml:3:19: upstreams.api.max_connections:",
        "at least 1",
    );
}

#[test]
fn upstream_keep_alive_is_for_http1_upstreams() {
    assert!(ok(MINIMAL).upstreams["api"].keep_alive);
    let config = ok(&MINIMAL.replace("url = ", "keep_alive = false\nurl = "));
    assert!(!config.upstreams["api"].keep_alive);
    let out = crate::config::describe(&config);
    assert!(
        out.contains("(http://127.0.0.1:3000, a connection per request)"),
        "{out}"
    );
    single(
        &MINIMAL.replace("url = ", "http2 = true\nkeep_alive = false\nurl = "),
        "t.toml:4:14: upstreams.api.keep_alive:",
        "HTTP/1 upstreams only",
    );
}

/// Requests are routed with their dot segments resolved, so a match path
/// with one where it cannot be part of a longer segment never matches.
#[test]
fn a_match_path_with_a_dot_segment_is_refused() {
    for (kind, path) in [
        ("path", "/v1/../charges"),
        ("path", "/a/./b"),
        ("path", "/v1/."),
        ("path", "/v1/%2E%2e/x"),
        ("path_prefix", "/v1/../charges"),
        ("path_prefix", "/./v1"),
    ] {
        let text = MINIMAL.replace("path_prefix = \"/\"", &format!("{kind} = \"{path}\""));
        single(
            &text,
            "t.toml:8:",
            &format!("routes[0].match.{kind}: \"{path}\" has a \".\" or \"..\" segment"),
        );
    }
    // A prefix may end in what begins a longer segment (`/.well-known`).
    for prefix in ["/.", "/v1/..", "/v1/.well-known", "/a..b/"] {
        ok(&MINIMAL.replace(
            "path_prefix = \"/\"",
            &format!("path_prefix = \"{prefix}\""),
        ));
    }
}

/// The marker is set over any field of its name: one the answer needs, or
/// one dropped with the connection's fields, is refused.
#[test]
fn replay_header_is_not_a_field_the_answer_needs() {
    for name in [
        "Content-Type",
        "date",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
    ] {
        single(
            &format!("[defaults]\nreplay_header = \"{name}\"\n{MINIMAL}"),
            "t.toml:2:17: defaults.replay_header:",
            "use a name of its own",
        );
    }
    let config = ok(&format!(
        "[defaults]\nreplay_header = \"X-Replayed\"\n{MINIMAL}"
    ));
    let marker = &config.routes[0].policy.replay_header;
    assert_eq!(marker.as_written(), "X-Replayed");
    assert_eq!(marker.name(), "x-replayed");
}

/// Counts the gateway sets aside room for have a ceiling: one near `i64::MAX`
/// passed `check` and then panicked `serve` (or every request) on allocation.
#[test]
fn counts_that_size_buffers_have_a_ceiling() {
    const HUGE: &str = "9223372036854775807";
    single(
        &format!("[server]\nmax_connections = {HUGE}\n{MINIMAL}"),
        "t.toml:2:19: server.max_connections:",
        "must be at most 1000000",
    );
    single(
        &format!("[server]\nmax_headers = 10001\n{MINIMAL}"),
        "t.toml:2:15: server.max_headers:",
        "must be at most 10000",
    );
    single(
        &MINIMAL.replace("url = ", &format!("max_connections = {HUGE}\nurl = ")),
        "t.toml:3:19: upstreams.api.max_connections:",
        "must be at most 1000000",
    );
    single(
        &format!(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\npool_size = {HUGE}\n{MINIMAL}"
        ),
        "t.toml:4:13: store.pool_size:",
        "must be at most 10000",
    );
    let config = ok(&format!(
        "[server]\nmax_connections = 1000000\nmax_headers = 10000\n{MINIMAL}"
    ));
    assert_eq!(config.server.max_connections, 1_000_000);
    assert_eq!(config.server.max_headers, 10_000);
}

#[test]
fn bare_and_quoted_durations() {
    // Unquoted with a unit is a TOML syntax error, still located and named.
    single(
        &format!("[defaults]\nretention = 24h\n{MINIMAL}"),
        "t.toml:2:",
        "defaults.retention",
    );
    // A bare number has no unit: a semantic error with a hint.
    single(
        &format!("[defaults]\nretention = 24\n{MINIMAL}"),
        "t.toml:2:13: defaults.retention:",
        "\"24s\"",
    );
    assert_eq!(
        ok(&format!("[defaults]\nretention = \"24h\"\n{MINIMAL}")).routes[0]
            .policy
            .retention,
        Duration::from_secs(86_400)
    );
}

#[test]
fn bad_duration() {
    single(
        &format!("[server]\nshutdown_grace = \"30 seconds\"\n{MINIMAL}"),
        "t.toml:2:18: server.shutdown_grace:",
        "invalid duration",
    );
    single(
        &format!("[defaults]\nretention = \"0s\"\n{MINIMAL}"),
        "t.toml:2:13: defaults.retention:",
        "greater than zero",
    );
    single(
        &format!("[server]\nbody_read_timeout = \"0s\"\n{MINIMAL}"),
        "t.toml:2:21: server.body_read_timeout:",
        "greater than zero",
    );
}

#[test]
fn bad_size_and_integer_size() {
    single(
        &format!("[server]\nmax_request_body = \"1 MB\"\n{MINIMAL}"),
        "t.toml:2:20: server.max_request_body:",
        "invalid size",
    );
    let config = ok(&format!(
        "[server]\nmax_request_body = 2048\nmax_header_bytes = \"2KB\"\n{MINIMAL}"
    ));
    assert_eq!(config.server.max_request_body, 2048);
    assert_eq!(config.server.max_header_bytes, 2000);
}

#[test]
fn buffered_bodies_hold_at_least_one_largest_body() {
    let config = ok(MINIMAL);
    assert_eq!(config.server.max_buffered_bodies, 256 << 20);
    // Not written: grows with max_request_body.
    let config = ok(&format!("[server]\nmax_request_body = \"1GiB\"\n{MINIMAL}"));
    assert_eq!(config.server.max_buffered_bodies, 1 << 30);
    let config = ok(&format!(
        "[server]\nmax_request_body = \"2MiB\"\nmax_buffered_bodies = \"2MiB\"\n{MINIMAL}"
    ));
    assert_eq!(config.server.max_buffered_bodies, 2 << 20);
    single(
        &format!(
            "[server]\nmax_request_body = \"2MiB\"\nmax_buffered_bodies = \"1MiB\"\n{MINIMAL}"
        ),
        "t.toml:3:23: server.max_buffered_bodies:",
        "at least server.max_request_body (2097152 bytes)",
    );
}

/// Both stores keep an answer in one field, which neither takes past
/// about a gigabyte: an answer the limit lets through that the store then
/// refused would hold its key until its lease ended, and run again after.
#[test]
fn a_stored_answer_is_at_most_what_every_store_holds() {
    let config = ok(&format!(
        "[server]\nmax_stored_response = \"512MiB\"\n{MINIMAL}"
    ));
    assert_eq!(config.server.max_stored_response, 512 << 20);
    single(
        &format!("[server]\nmax_stored_response = \"1GiB\"\n{MINIMAL}"),
        "t.toml:2:23: server.max_stored_response:",
        "must be at most 512MiB (536870912 bytes), the largest answer every store can \
         record (got 1073741824 bytes)",
    );
}

#[test]
fn route_naming_unknown_upstream() {
    let text = MINIMAL.replace("upstream = \"api\"", "upstream = \"apy\"");
    let errors = errors(&text);
    assert_eq!(
        errors,
        ["t.toml:7:12: routes[0].upstream: unknown upstream \"apy\" (defined: api)"]
    );
}

#[test]
fn duplicate_route_name() {
    let text = format!(
        "{MINIMAL}\n[[routes]]\nname = \"all\"\nupstream = \"api\"\nmatch = {{ path = \"/x\" }}\n"
    );
    let errors = errors(&text);
    assert_eq!(
        errors,
        ["t.toml:11:8: routes[1].name: duplicate route name \"all\" (first at routes[0], line 6)"]
    );
}

#[test]
fn routes_missing_or_empty() {
    let missing = errors("[upstreams.api]\nurl = \"http://h\"\n");
    assert_eq!(
        missing,
        ["t.toml: routes: at least one [[routes]] is required"]
    );
    let empty = errors("routes = []\n[upstreams.api]\nurl = \"http://h\"\n");
    assert_eq!(
        empty,
        ["t.toml:1:10: routes: at least one [[routes]] is required"]
    );
}

#[test]
fn lock_timeout_must_exceed_upstream_timeout() {
    let text = MINIMAL.replace("3000\"", "3000\"\ntimeout = \"60s\"");
    single(
        &text,
        "t.toml:6:1: routes[0].lock_timeout:",
        "lock_timeout 60s (built-in default) must be longer than the timeout 60s of upstream \"api\"",
    );
    let own = format!("{text}lock_timeout = \"30s\"\n");
    single(&own, "t.toml:10:16: routes[0].lock_timeout:", "30s");
    let inherited = format!("[defaults]\nlock_timeout = \"45s\"\n{text}");
    single(
        &inherited,
        "t.toml:2:16: defaults.lock_timeout:",
        "(inherited by routes[0])",
    );
    // Not for pass-through routes.
    ok(&format!("{text}idempotency = false\n"));
}

#[test]
fn several_errors_are_collected() {
    let text = r#"
[server]
listen = "localhost"
max_request_body = "big"

[upstreams.api]
url = "ftp://h"

[defaults]
scope = ["cookie"]
fingerprint = ["body", "header:bad header"]
release_statuses = [200, 429, 700]
key = { header = "a", json_pointer = "/b" }
on_in_flight = "queue"

[[routes]]
name = "x"
upstream = "nope"
match = { path = "/a", path_prefix = "/b", methods = ["G T"] }
"#;
    let found = errors(text);
    let expected = [
        "t.toml:3:10: server.listen:",
        "t.toml:4:20: server.max_request_body:",
        "t.toml:7:7: upstreams.api.url:",
        "t.toml:13:7: defaults.key:",
        "t.toml:14:16: defaults.on_in_flight:",
        "t.toml:10:10: defaults.scope[0]:",
        "t.toml:11:24: defaults.fingerprint[1]:",
        "t.toml:12:21: defaults.release_statuses[0]:",
        "t.toml:12:31: defaults.release_statuses[2]:",
        "t.toml:18:12: routes[0].upstream:",
        "t.toml:19:9: routes[0].match:",
        "t.toml:19:55: routes[0].match.methods[0]:",
    ];
    for prefix in expected {
        assert!(
            found.iter().any(|e| e.starts_with(prefix)),
            "missing {prefix} in {found:#?}"
        );
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn match_rules() {
    let text = MINIMAL.replace("{ path_prefix = \"/\" }", "{ path_prefix = \"v1\" }");
    single(
        &text,
        "t.toml:8:25: routes[0].match.path_prefix:",
        "must start with \"/\"",
    );
    let text = MINIMAL.replace("{ path_prefix = \"/\" }", "{ methods = [\"GET\"] }");
    single(
        &text,
        "t.toml:8:9: routes[0].match:",
        "exactly one of path or path_prefix",
    );
    // A repeat is likely a typo for another method, but files that held
    // one always started: warned about, not refused.
    let text = MINIMAL.replace(
        "{ path_prefix = \"/\" }",
        "{ path_prefix = \"/\", methods = [\"POST\", \"post\"] }",
    );
    let config = ok(&text);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(
        config.warnings[0].starts_with("t.toml:8:49: routes[0].match.methods[1]:")
            && config.warnings[0].contains("\"post\" is listed twice"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn client_cert_scope_needs_client_ca() {
    let text = format!("[defaults]\nscope = [\"client_cert\"]\n{MINIMAL}");
    single(
        &text,
        "t.toml:2:10: defaults.scope[0]:",
        "server.tls.client_ca",
    );
}

#[test]
fn tls_needs_cert_and_key() {
    let text = format!("[server.tls]\ncert = \"c.pem\"\n{MINIMAL}");
    single(&text, "t.toml:1:1: server.tls.key:", "both cert and key");
    let text = MINIMAL.replace(
        "http://127.0.0.1:3000\"",
        "https://127.0.0.1:3000\"\n[upstreams.api.tls]\nkey = \"k.pem\"",
    );
    single(
        &text,
        "t.toml:4:1: upstreams.api.tls.cert:",
        "both cert and key",
    );
}

/// `[upstreams.NAME.tls]` beside an http:// url: nothing would be encrypted,
/// which the table says it is (likely a url not switched to https://).
#[test]
fn upstream_tls_needs_an_https_url() {
    let text = MINIMAL.replace("3000\"", "3000\"\n[upstreams.api.tls]\nca = \"ca.pem\"");
    single(
        &text,
        "t.toml:4:1: upstreams.api.tls:",
        "only applies to an https:// url",
    );
    ok(&text.replace("http://", "https://"));
}

/// A keyed request cut off at the end of the grace period is recorded as an
/// unknown outcome, which someone then has to reconcile: a grace shorter than
/// an idempotent route's upstream timeout is worth a warning.
#[test]
fn shutdown_grace_shorter_than_an_upstream_timeout_warns() {
    let text = MINIMAL.replace("3000\"", "3000\"\ntimeout = \"20s\"");
    let text = format!("[server]\nshutdown_grace = \"5s\"\n{text}");
    assert_eq!(
        ok(&text).warnings,
        [
            "t.toml:2:18: server.shutdown_grace: 5s is shorter than the timeout 20s of upstream \
             \"api\": a keyed request still running at SIGTERM can be cut off, answered and \
             recorded as a 504 outcome-unknown that its retries get too, until the key is \
             purged"
        ]
    );
    assert!(ok(&text.replace("\"5s\"", "\"20s\"")).warnings.is_empty());
    // Pass-through routes record nothing.
    let passing = text.replace("match = {", "idempotency = false\nmatch = {");
    assert!(ok(&passing).warnings.is_empty());
}

/// Matching only methods idempotency does not apply to leaves the route a
/// pass-through in all but name.
#[test]
fn match_methods_outside_the_policy_methods_warn() {
    let text = MINIMAL.replace(
        "match = { path_prefix = \"/\" }",
        "match = { path_prefix = \"/\", methods = [\"PUT\", \"DELETE\"] }",
    );
    assert_eq!(
        ok(&text).warnings,
        [
            "t.toml:8:9: routes[0].match.methods: none of PUT,DELETE is in methods (POST,PATCH): \
             every request on this route passes through without idempotency"
        ]
    );
    assert!(
        ok(&format!("{text}methods = [\"PUT\"]\n"))
            .warnings
            .is_empty()
    );
    assert!(
        ok(&format!("{text}idempotency = false\n"))
            .warnings
            .is_empty()
    );
}

#[test]
fn shadowed_route_warns() {
    let text = format!(
        "{MINIMAL}\n[[routes]]\nname = \"later\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/v1\" }}\n"
    );
    let config = ok(&text);
    assert_eq!(
        config.warnings,
        [
            "t.toml:10:1: routes[1]: route \"later\" is shadowed by route \"all\" (routes[0]) and will never match"
        ]
    );
}

#[test]
fn policy_on_pass_through_route_warns() {
    let text = format!("{MINIMAL}idempotency = false\nretention = \"1h\"\nrequired = true\n");
    let config = ok(&text);
    assert_eq!(
        config.warnings,
        ["t.toml:9:15: routes[0]: required, retention ignored: idempotency = false"]
    );
}

#[test]
fn describe_lists_routes_policy_and_warnings() {
    let text = format!(
        "{MINIMAL}retention = \"72h\"\non_in_flight = \"wait\"\nwait_timeout = \"500ms\"\n\n[[routes]]\nname = \"rest\"\nupstream = \"api\"\nmatch = {{ path = \"/x\", methods = [\"GET\"] }}\nidempotency = false\n"
    );
    let out = describe(&ok(&text));
    assert!(out.contains("route all\n  match     path_prefix / any method\n  upstream  api (http://127.0.0.1:3000)\n"), "{out}");
    assert!(
        out.contains("retention      72h, lock_timeout 60s"),
        "{out}"
    );
    assert!(out.contains("in-flight      wait 500ms"), "{out}");
    assert!(
        out.contains("route rest\n  match     path /x methods GET\n"),
        "{out}"
    );
    assert!(out.contains("  policy    pass-through"), "{out}");
    assert!(out.contains("warning: t.toml:"), "{out}");
    let rewritten = describe(&ok(&format!("{MINIMAL}preserve_host = false\n")));
    assert!(
        rewritten.contains("  upstream  api (http://127.0.0.1:3000), Host: the upstream's\n"),
        "{rewritten}"
    );
}

#[test]
fn shipped_quick_start_config_is_valid() {
    let text = include_str!("../../../config/idemgate.toml");
    // As the quick start runs it: with the admin token exported.
    let env =
        |name: &str| (name == "IDEMGATE_ADMIN_TOKEN").then(|| "try-it-0123456789abcdef".to_owned());
    let config = parse(text, Path::new("t.toml"), &env).expect("valid");
    assert!(matches!(config.store, StoreConfig::Embedded(_)));
    let names: Vec<&str> = config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["charges", "orders", "rest"]);
    assert!(config.routes[0].policy.required);
    assert_eq!(
        config.routes[0].policy.retention,
        Duration::from_secs(72 * 3600)
    );
    assert!(!config.routes[2].idempotency);
    assert_eq!(config.warnings, Vec::<String>::new());
    // The reference shows this exact output.
    let docs = include_str!("../../../docs/configuration.md");
    assert!(docs.contains(&describe(&config)), "{}", describe(&config));
}

#[test]
fn shipped_postgres_example_is_valid() {
    let text = include_str!("../../../config/examples/postgres-redis.toml");
    let env = |name: &str| (name == "DATABASE_URL").then(|| "postgres://u@db/idemgate".to_owned());
    let config = parse(text, Path::new("postgres-redis.toml"), &env).expect("valid");
    let StoreConfig::Postgres(pg) = &config.store else {
        panic!("not postgres")
    };
    assert!(pg.redis.is_some());
    assert_eq!(
        config.routes[0].policy.key,
        [KeySource::JsonPointer("/id".into())]
    );
    assert_eq!(config.warnings, Vec::<String>::new());
}

#[test]
fn toml_errors_in_a_later_route_name_its_index() {
    let text =
        format!("{MINIMAL}\n[[routes]]\nname = \"b\"\nupstream = \"api\"\nrequired = \"yes\"\n");
    single(
        &text,
        "t.toml:13:12: routes[1].required:",
        "expected a boolean",
    );
    let text = format!("{MINIMAL}\n[[routes]]\nname = \"b\"\nretention = 1h\n");
    single(
        &text,
        "t.toml:12:13: routes[1].retention:",
        "must be quoted",
    );
}

#[test]
fn listen_addresses_must_differ() {
    let text = format!("[server]\nlisten = \"127.0.0.1:9090\"\n{MINIMAL}");
    single(&text, "t.toml:2:10: server.listen:", "must differ");
}

#[test]
fn listen_addresses_that_share_a_port_through_a_wildcard_are_refused() {
    // `serve` could bind only the first: the wildcard takes the port on
    // every address ([::] on IPv4 too: Linux binds it dual-stack).
    for (listen, admin) in [
        ("127.0.0.1:7000", "0.0.0.0:7000"),
        ("0.0.0.0:7000", "10.1.2.3:7000"),
        ("127.0.0.1:7000", "[::]:7000"),
        ("[::]:7000", "0.0.0.0:7000"),
        ("[::1]:7000", "[::]:7000"),
    ] {
        let text =
            format!("[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\n{MINIMAL}");
        single(&text, "t.toml:3:16: server.admin_listen:", "port 7000");
    }
}

#[test]
fn listen_addresses_that_do_not_overlap_are_accepted() {
    // Port 0 is a fresh port for each listener; distinct addresses of one
    // port, or one family's loopback beside the other's, bind side by side.
    for (listen, admin) in [
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("0.0.0.0:0", "[::]:0"),
        ("127.0.0.1:7000", "127.0.0.2:7000"),
        ("[::1]:7000", "127.0.0.1:7000"),
        ("[::1]:7000", "0.0.0.0:7000"),
    ] {
        ok(&format!(
            "[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\n{MINIMAL}"
        ));
    }
}

#[test]
fn unused_upstream_warns() {
    let text = format!("{MINIMAL}\n[upstreams.spare]\nurl = \"http://a\"\n");
    assert_eq!(
        ok(&text).warnings,
        ["t.toml:10:1: upstreams.spare: not used by any route"]
    );
}

#[test]
fn resource_limits_default_inherit_and_refuse_nonsense() {
    let config = ok(MINIMAL);
    assert_eq!(config.server.max_headers, 100);
    assert_eq!(config.routes[0].policy.max_in_flight, 0);
    let config = ok(&format!(
        "[server]\nmax_headers = 20\n[defaults]\nmax_in_flight = 8\n{MINIMAL}"
    ));
    assert_eq!(config.server.max_headers, 20);
    assert_eq!(config.routes[0].policy.max_in_flight, 8);
    single(
        &format!("[defaults]\nmax_in_flight = -1\n{MINIMAL}"),
        "t.toml:2:17: defaults.max_in_flight:",
        "must be 0",
    );
    single(
        &format!("[server]\nmax_headers = 0\n{MINIMAL}"),
        "t.toml:2:15: server.max_headers:",
        "at least 1",
    );
}

/// The body options change only how the body is fingerprinted: without
/// "body" in `fingerprint` they do nothing, which the operator is told.
#[test]
fn body_options_without_the_body_in_the_fingerprint_warn() {
    let text = format!(
        "[defaults]\nfingerprint = [\"method\", \"path\"]\ncanonical_json = true\n{MINIMAL}\
         fingerprint_body = {{ exclude = [\"/a\"] }}\ncanonical_form = false\n"
    );
    assert_eq!(
        ok(&text).warnings,
        [
            "t.toml:3:18: defaults.canonical_json: has no effect: no route that inherits it \
             has \"body\" in its fingerprint",
            "t.toml:12:20: routes[0].fingerprint_body: has no effect: this route's \
             fingerprint (method, path) leaves out \"body\"",
            "t.toml:13:18: routes[0].canonical_form: has no effect: this route's \
             fingerprint (method, path) leaves out \"body\"",
        ]
    );
    // One route that inherits it and fingerprints the body is enough.
    let text = format!(
        "[defaults]\nfingerprint = [\"method\", \"path\"]\ncanonical_json = true\n{MINIMAL}\
         \n[[routes]]\nname = \"b\"\nupstream = \"api\"\nmatch = {{ path = \"/b\" }}\n\
         fingerprint = [\"body\"]\n"
    );
    let warnings = ok(&text).warnings;
    assert!(
        !warnings.iter().any(|w| w.contains("no effect")),
        "{warnings:#?}"
    );
    // The built-in values are not the operator's: no warning for them.
    let text = format!("[defaults]\nfingerprint = [\"method\", \"path\"]\n{MINIMAL}");
    assert_eq!(ok(&text).warnings, Vec::<String>::new());
    // With "body" in the fingerprint, the options are used.
    let text = format!("[defaults]\ncanonical_json = true\n{MINIMAL}canonical_form = true\n");
    assert_eq!(ok(&text).warnings, Vec::<String>::new());
}

/// The code is appended to `problem_base` as is: a base ending in a letter or
/// digit glues the code onto its last word ("…/errorsinvalid-key").
#[test]
fn a_problem_base_that_does_not_end_its_path_warns() {
    let text = |base: &str| format!("[server]\nproblem_base = {base:?}\n{MINIMAL}");
    assert_eq!(
        ok(&text("https://docs.example.com/errors")).warnings,
        [
            "t.toml:2:16: server.problem_base: the code is appended as is, giving \
             \"https://docs.example.com/errorsinvalid-key\"; end it with \"/\" \
             (\"https://docs.example.com/errors/\")"
        ]
    );
    assert_eq!(
        ok(&text("urn:example:errors")).warnings,
        [
            "t.toml:2:16: server.problem_base: the code is appended as is, giving \
             \"urn:example:errorsinvalid-key\"; end it with \":\" (\"urn:example:errors:\")"
        ]
    );
    for good in [
        "https://docs.example.com/errors/",
        "https://docs.example.com/errors#",
        "https://docs.example.com/errors?code=",
        "https://docs.example.com/errors/idemgate-",
        "tag:example.com,2024:errors:",
    ] {
        assert_eq!(ok(&text(good)).warnings, Vec::<String>::new(), "{good}");
    }
}

/// A `[routes.X]` header opens a table in the last `[[routes]]` entry: a
/// fault in it is that route's.
#[test]
fn toml_errors_in_a_route_sub_table_name_its_index() {
    let with = |tail: &str| format!("{MINIMAL}{tail}");
    single(
        &with(
            "webhook = { scheme = \"stripe\", secrets_env = \"X\" }\n\n[routes.webhook]\nscheme = \"github\"\n",
        ),
        "t.toml:11:9: routes[0].webhook:",
        "duplicate key",
    );
    single(
        &with("\n[routes.webhook]\nscheme = \"github\"\nscheme = \"stripe\"\n"),
        "t.toml:12:1: routes[0].webhook.scheme:",
        "duplicate key",
    );
    single(
        &with(
            "\n[[routes]]\nname = \"b\"\nupstream = \"api\"\nmatch = { path = \"/b\" }\n\n[ routes . match ]\npath = \"/x\"\n",
        ),
        "t.toml:15:",
        "routes[1].match: duplicate key",
    );
    single(
        &with("\n[routes.webhook]\nscheme = 1\n"),
        "t.toml:11:10: routes[0].webhook.scheme:",
        "expected a string",
    );
}

//! Operating retention through the real binary: replay ages in
//! `/metrics` and `/admin/routes`, `idemgate_records`, listing a route's
//! records by state (`GET /admin/keys/{route}`, `idemgate keys list`).

mod common;
mod pg_support;

use std::time::{Duration, Instant};

use common::client::Client;
use common::config::{Config, Route, Store, Upstream, raw};
use common::{GatewayProcess, MockUpstream, TestDir};
use serde_json::Value;

fn config() -> Config {
    Config::new()
        .admin_token_env(common::admin::TOKEN_ENV)
        .with_store(|s| s.set("sweep_interval", "200ms"))
        .upstream(Upstream::api().timeout("500ms"))
        .defaults("lock_timeout", "5s")
        .defaults("retention", "1h")
        .route(Route::api("charges", "/v1/charges"))
}

const TOKEN: &str = "s3cret-token-for-tests";

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    common::admin::start_with_token(name, &config(), TOKEN).await
}

async fn admin_get(admin: &Client, path: &str) -> (u16, Value) {
    let auth = common::admin::bearer(TOKEN);
    let reply = admin
        .send("GET", path, &[("authorization", auth.as_str())], "")
        .await;
    let status = reply.status.as_u16();
    let body = if reply.body.is_empty() {
        Value::Null
    } else {
        reply.json()
    };
    (status, body)
}

/// The value of one exposition line, e.g. `name{labels}`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Waits (the gauge is refreshed every `sweep_interval`) until `series`
/// reads `want`.
async fn await_sample(admin: &Client, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = admin.get("/metrics").await.text();
        if sample(&text, series) == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never read {want}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn keys_of(page: &Value) -> Vec<String> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_timed_out_request_is_listed_as_outcome_unknown_until_purged() {
    let (_dir, _upstream, gateway) = setup("retention-unknown").await;
    let client = gateway.client();
    let admin = gateway.admin_client();

    let lost = client
        .post("/v1/charges?delay_ms=2000", Some("k-lost"), "{}")
        .await;
    assert_eq!(lost.status, 504, "{}", lost.text());
    let fine = client.post("/v1/charges", Some("k-fine"), "{}").await;
    assert_eq!(fine.status, 201);
    // The upstream's own 502 is an answer like any other.
    let bad = client
        .post("/v1/charges?status=502", Some("k-bad"), "{}")
        .await;
    assert_eq!(bad.status, 502);

    let (status, page) = admin_get(&admin, "/admin/keys/charges?state=outcome_unknown").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(keys_of(&page), ["k-lost"]);
    let record = &page["records"][0];
    assert_eq!(record["state"], "outcome_unknown");
    assert_eq!(record["status"], 504);
    assert!(record["completed_at"].is_string() && record["expires_at"].is_string());
    assert_eq!(page["next"], Value::Null);
    let (_, page) = admin_get(&admin, "/admin/keys/charges?state=completed").await;
    let mut completed = keys_of(&page);
    completed.sort();
    assert_eq!(completed, ["k-bad", "k-fine"]);
    let (_, shown) = admin_get(&admin, "/admin/keys/charges/k-lost").await;
    assert_eq!(shown[0]["state"], "outcome_unknown");

    // The same from the command line, beside the running gateway.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["keys", "list", "-c"])
        .arg(gateway.config_path())
        .args(["charges", "--state", "outcome_unknown", "--limit", "5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(keys_of(&listed), ["k-lost"]);

    let unknown = r#"idemgate_records{route="charges",state="outcome_unknown"}"#;
    await_sample(&admin, unknown, 1.0).await;
    await_sample(
        &admin,
        r#"idemgate_records{route="charges",state="completed"}"#,
        2.0,
    )
    .await;
    await_sample(
        &admin,
        r#"idemgate_records{route="charges",state="in_flight"}"#,
        0.0,
    )
    .await;

    // Reconciled with the upstream, the operator purges the key.
    let auth = common::admin::bearer(TOKEN);
    let purged = admin
        .send(
            "DELETE",
            "/admin/keys/charges/k-lost",
            &[("authorization", auth.as_str())],
            "",
        )
        .await;
    assert_eq!(purged.status, 204);
    let (_, page) = admin_get(&admin, "/admin/keys/charges?state=outcome_unknown").await;
    assert!(keys_of(&page).is_empty(), "{page}");
    await_sample(&admin, unknown, 0.0).await;
}

#[tokio::test]
async fn listing_pages_with_the_cursor_and_refuses_bad_parameters() {
    let (_dir, _upstream, gateway) = setup("retention-pages").await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    for n in 0..25 {
        let reply = client
            .post("/v1/charges", Some(&format!("key-{n:02}")), "{}")
            .await;
        assert_eq!(reply.status, 201);
    }
    let mut seen = Vec::new();
    let mut path = "/admin/keys/charges?limit=10".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = admin_get(&admin, &path).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(keys_of(&page));
        match page["next"].as_str() {
            Some(next) => path = format!("/admin/keys/charges?limit=10&after={next}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|n| format!("key-{n:02}")).collect();
    assert_eq!(seen, want, "each once, oldest first");

    // A cursor belongs to its listing: on another state filter or another
    // route it would start at this listing's position and skip the older
    // records there unseen.
    let (_, first) = admin_get(&admin, "/admin/keys/charges?limit=10").await;
    let next = first["next"].as_str().unwrap().to_owned();
    for elsewhere in [
        format!("/admin/keys/charges?state=completed&after={next}"),
        format!("/admin/keys/other?after={next}"),
    ] {
        let (status, problem) = admin_get(&admin, &elsewhere).await;
        assert_eq!(status, 400, "{elsewhere}: {problem}");
        assert_eq!(problem["code"], "invalid-query", "{elsewhere}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("same route and state"),
            "{problem}"
        );
    }

    for bad in [
        "state=done",
        "limit=0",
        "limit=1001",
        "limit=many",
        "after=not-a-cursor",
        "sort=desc",
    ] {
        let (status, problem) = admin_get(&admin, &format!("/admin/keys/charges?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {problem}");
        assert_eq!(problem["code"], "invalid-query", "{bad}");
    }
    let none = admin.get("/admin/keys/charges").await;
    assert_eq!(none.status, 401, "the token is required");
    let none = admin.get("/admin/routes").await;
    assert_eq!(none.status, 401, "the token is required");
}

/// Replays of records completed 0 s and ~7,000 s ago land in the buckets
/// of those ages; the record's completion is moved back in the file while
/// the gateway is stopped, as the store's clock would have it.
#[tokio::test]
async fn replays_at_known_ages_land_in_their_buckets() {
    let (dir, _upstream, mut gateway) = setup("retention-ages").await;
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("old"), "{}").await.status,
        201
    );
    gateway.kill();
    let conn = rusqlite::Connection::open(dir.path("store.db")).unwrap();
    conn.execute(
        "UPDATE records SET completed_at = completed_at - 7000000, \
         created_at = created_at - 7000000 WHERE key = 'old'",
        [],
    )
    .unwrap();
    drop(conn);
    gateway.restart();
    let client = gateway.client();
    let admin = gateway.admin_client();

    let replay = client.post("/v1/charges", Some("old"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        client.post("/v1/charges", Some("new"), "{}").await.status,
        201
    );
    let replay = client.post("/v1/charges", Some("new"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    let metrics = admin.get("/metrics").await.text();
    let bucket = |le: &str| {
        sample(
            &metrics,
            &format!(r#"idemgate_replay_age_seconds_bucket{{route="charges",le="{le}"}}"#),
        )
    };
    assert_eq!(bucket("1"), Some(1.0), "the fresh one:\n{metrics}");
    assert_eq!(bucket("3600"), Some(1.0), "the old one is older");
    assert_eq!(bucket("7200"), Some(2.0), "and younger than 2 h");
    assert_eq!(
        sample(
            &metrics,
            r#"idemgate_replay_age_seconds_count{route="charges"}"#
        ),
        Some(2.0)
    );

    let (status, routes) = admin_get(&admin, "/admin/routes").await;
    assert_eq!(status, 200, "{routes}");
    let ages = &routes[0]["replay_age"];
    assert_eq!(ages["count"], 2);
    let max = ages["max"].as_f64().unwrap();
    assert!((7000.0..7005.0).contains(&max), "{ages}");
    assert!(ages["p50"].as_f64().unwrap() < 1.0, "{ages}");
    assert!(ages["p999"].as_f64().unwrap() >= 6650.0, "{ages}");
}

#[tokio::test]
async fn admin_routes_shows_the_reloaded_policy() {
    let (_dir, _upstream, gateway) = setup("retention-routes").await;
    let admin = gateway.admin_client();
    let (status, routes) = admin_get(&admin, "/admin/routes").await;
    assert_eq!(status, 200, "{routes}");
    let route = &routes[0];
    assert_eq!(route["name"], "charges");
    assert_eq!(route["upstream"], "api");
    // The match as the file writes it, and every effective policy field
    // beside the route's name.
    assert_eq!(
        route["match"],
        serde_json::json!({ "path_prefix": "/v1/charges" })
    );
    assert_eq!(route["retention"], 3600.0);
    assert_eq!(route["lock_timeout"], 5.0);
    assert_eq!(route["key"][0]["header"], "idempotency-key");
    assert_eq!(route["on_in_flight"], "conflict");
    assert_eq!(route["release_statuses"], serde_json::json!([429, 503]));
    assert_eq!(route["replay_age"]["count"], 0);
    assert_eq!(route["replay_age"]["p99"], Value::Null);
    let retention = r#"idemgate_route_retention_seconds{route="charges"}"#;
    await_sample(&admin, retention, 3600.0).await;

    gateway.write_config(&config().defaults("retention", "36h"));
    let auth = common::admin::bearer(TOKEN);
    let reload = admin
        .send(
            "POST",
            "/admin/reload",
            &[("authorization", auth.as_str())],
            "",
        )
        .await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let (_, routes) = admin_get(&admin, "/admin/routes").await;
    assert_eq!(routes[0]["retention"], 129_600.0);
    await_sample(&admin, retention, 129_600.0).await;
}

/// `idemgate_records` counts a record in flight while its request runs and
/// completed once answered; past its retention it is no longer counted,
/// and the sweep deletes it and counts it in `idemgate_records_swept_total`.
#[tokio::test]
async fn records_are_counted_by_state_until_swept() {
    let config = config()
        .upstream(Upstream::api().timeout("3s"))
        .with_route("charges", |route| route.set("retention", "1s"));
    let (_dir, _upstream, gateway) =
        common::admin::start_with_token("retention-swept", &config, TOKEN).await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let in_flight = r#"idemgate_records{route="charges",state="in_flight"}"#;
    let completed = r#"idemgate_records{route="charges",state="completed"}"#;
    let swept = "idemgate_records_swept_total";
    await_sample(&admin, swept, 0.0).await;

    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=1500", Some("slow"), "{}")
                .await
        })
    };
    await_sample(&admin, in_flight, 1.0).await;
    assert_eq!(slow.await.unwrap().status, 201);
    for key in ["a", "b"] {
        assert_eq!(
            client.post("/v1/charges", Some(key), "{}").await.status,
            201
        );
    }
    await_sample(&admin, swept, 3.0).await;
    await_sample(&admin, completed, 0.0).await;
    await_sample(&admin, in_flight, 0.0).await;
}

/// A cursor whose key holds a NUL byte (hex is easy to edit), and a route
/// name written `%00`: no record can hold either, and Postgres refuses such
/// text outright. Both are the caller's mistake, answered as one (400
/// `invalid-query`, 404 `not-found`, `keys list` exit 1 on `--after`), on
/// the embedded file as on Postgres: never a 503 `store-unavailable` counted
/// as a store error, which would page whoever watches the store.
#[tokio::test]
async fn a_nul_in_a_cursor_or_a_route_name_is_refused_not_a_store_error() {
    let schema = pg_support::TestSchema::create().await;
    let prefix = pg_support::RedisPrefix::new("idemgate-nul");
    let postgres = config().store(
        Store::postgres(&schema.url())
            .set("pool_size", 2)
            .set("sweep_interval", "200ms")
            .redis(&pg_support::redis_url(), &prefix.0),
    );
    // Created at 1, key "\0", scope "": version 1, 8 bytes of time, the
    // key's length (4 bytes), the key, the scope.
    let nul_cursor = format!("01{:016x}{:08x}00", 1, 1);
    let auth = common::admin::bearer(TOKEN);
    let auth = [("authorization", auth.as_str())];
    for (name, config) in [("embedded", config()), ("postgres", postgres)] {
        let (_dir, _upstream, gateway) =
            common::admin::start_with_token(&format!("retention-nul-{name}"), &config, TOKEN).await;
        let client = gateway.client();
        let admin = gateway.admin_client();
        assert_eq!(
            client.post("/v1/charges", Some("k1"), "{}").await.status,
            201
        );

        let path = format!("/admin/keys/charges?after={nul_cursor}");
        let (status, problem) = admin_get(&admin, &path).await;
        assert_eq!(status, 400, "{name}: {problem}");
        assert_eq!(problem["code"], "invalid-query", "{name}");
        for (method, path) in [
            ("GET", "/admin/keys/char%00ges"),
            ("GET", "/admin/keys/char%00ges/k1"),
            ("DELETE", "/admin/keys/char%00ges/k1"),
        ] {
            let reply = admin.send(method, path, &auth, "").await;
            assert_eq!(
                reply.status,
                404,
                "{name}: {method} {path}: {}",
                reply.text()
            );
            assert_eq!(reply.json()["code"], "not-found", "{name}: {method} {path}");
        }
        let metrics = admin.get("/metrics").await.text();
        let errors: f64 = metrics
            .lines()
            .filter(|line| line.starts_with("idemgate_store_errors_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(errors, 0.0, "{name}: {metrics}");

        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["keys", "list", "-c"])
            .arg(gateway.config_path())
            .args(["charges", "--after", &nul_cursor])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("--after") && !stderr.contains("unavailable"),
            "{name}: {stderr}"
        );
    }
}

/// A route whose key is a header's, or else a JSON body's `/id`: the header
/// `ab` gives the key `ab`, the body `{"id":"\"ab\""}` the key `"ab"`, four
/// bytes, two quotes in them.
fn quoted_keys_config(store: Option<Store>) -> Config {
    let route = Route::api("j", "/v1/j").set(
        "key",
        raw(r#"[{ header = "Idempotency-Key" }, { json_pointer = "/id" }]"#),
    );
    let config = config().route(route);
    match store {
        Some(store) => config.store(store),
        None => config,
    }
}

/// The keys of route `j`, each with when its record was made, as the admin
/// API lists them and as `idemgate keys list` prints them (the same).
async fn listed_j(admin: &Client, gateway: &GatewayProcess) -> Vec<(String, String)> {
    let of = |page: &Value| -> Vec<(String, String)> {
        let mut keys: Vec<(String, String)> = (page["records"].as_array().unwrap().iter())
            .map(|r| {
                (
                    r["key"].as_str().unwrap().into(),
                    r["created_at"].to_string(),
                )
            })
            .collect();
        keys.sort();
        keys
    };
    let (status, page) = admin_get(admin, "/admin/keys/j").await;
    assert!(status == 200 || status == 404, "{status}: {page}");
    let api = if status == 404 { Vec::new() } else { of(&page) };
    let out = keys_command(gateway, &["list", "j"]);
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(of(&printed), api, "keys list: {printed}");
    api
}

fn keys_command(gateway: &GatewayProcess, args: &[&str]) -> std::process::Output {
    let (action, rest) = args.split_first().unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["keys", action, "-c"])
        .arg(gateway.config_path())
        .args(rest)
        .output()
        .unwrap()
}

fn key_path(key: &str) -> String {
    let key = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
    format!("/admin/keys/j/{key}")
}

/// docs/operating.md: the admin API and `idemgate keys` take a key as
/// stored, as the listing shows it. A JSON body can give a key that is
/// itself a whole quoted string (`"ab"`) beside the key `ab` a header
/// gives: each listed key, passed back, shows and purges its own record
/// and never the other's; a quoted name is never read as the key inside
/// its quotes. On the embedded file and on Postgres.
#[tokio::test]
async fn each_listed_key_names_its_own_record_even_one_that_reads_as_a_quoted_string() {
    let schema = pg_support::TestSchema::create().await;
    let postgres = Store::postgres(&schema.url());
    let auth = common::admin::bearer(TOKEN);
    let auth = [("authorization", auth.as_str())];
    let (bare, quoted) = ("ab", "\"ab\"");
    for (name, store) in [("embedded", None), ("postgres", Some(postgres))] {
        let config = quoted_keys_config(store);
        let (_dir, _upstream, gateway) =
            common::admin::start_with_token(&format!("quoted-key-{name}"), &config, TOKEN).await;
        let client = gateway.client();
        let admin = gateway.admin_client();
        // Whether the next request under each key replays (its record stood).
        let replayed = |key: &'static str| {
            let client = &client;
            async move {
                let reply = if key == bare {
                    client.post("/v1/j", Some(bare), "{}").await
                } else {
                    client.post("/v1/j", None, r#"{"id":"\"ab\""}"#).await
                };
                assert!(reply.status == 201, "{name} {key}: {}", reply.text());
                reply.header("idempotent-replayed") == Some("true")
            }
        };
        assert!(!replayed(bare).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!replayed(quoted).await);

        let listed = listed_j(&admin, &gateway).await;
        let keys: Vec<&str> = listed.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, [quoted, bare], "{name}");
        for (key, created_at) in &listed {
            let shown = admin.send("GET", &key_path(key), &auth, "").await;
            assert_eq!(shown.status, 200, "{name} {key}: {}", shown.text());
            let shown = shown.json();
            assert_eq!(shown.as_array().unwrap().len(), 1, "{name} {key}: {shown}");
            assert_eq!(
                shown[0]["created_at"].to_string(),
                *created_at,
                "{name} {key}"
            );
            let out = keys_command(&gateway, &["show", "j", key]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{name} {key}: {stderr}");
            let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(printed, shown, "{name} {key}");
        }

        // Each purge, by the admin API and by the command, takes the named
        // record only: the other key's next request still replays.
        let listed_keys = |listed: Vec<(String, String)>| -> Vec<String> {
            listed.into_iter().map(|(key, _)| key).collect()
        };
        for (purged, other, by_api) in [
            (quoted, bare, true),
            (bare, quoted, false),
            (bare, quoted, true),
            (quoted, bare, false),
        ] {
            if by_api {
                let reply = admin.send("DELETE", &key_path(purged), &auth, "").await;
                assert_eq!(reply.status, 204, "{name} {purged}: {}", reply.text());
            } else {
                let out = keys_command(&gateway, &["purge", "j", purged]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(0), "{name} {purged}: {stderr}");
            }
            let left = listed_keys(listed_j(&admin, &gateway).await);
            assert_eq!(left, [other], "{name}: {purged} purged (api: {by_api})");
            assert!(
                replayed(other).await,
                "{name}: {purged} purged (api: {by_api})"
            );
            assert!(
                !replayed(purged).await,
                "{name}: {purged} purged (api: {by_api})"
            );
        }

        // With only `ab` stored, `"ab"` names no record: a 404 that says a
        // quoted key is stored without its quotes, and `ab` is untouched.
        let reply = admin.send("DELETE", &key_path(quoted), &auth, "").await;
        assert_eq!(reply.status, 204, "{name}: {}", reply.text());
        assert_eq!(listed_keys(listed_j(&admin, &gateway).await), [bare]);
        for method in ["GET", "DELETE"] {
            let reply = admin.send(method, &key_path(quoted), &auth, "").await;
            assert_eq!(reply.status, 404, "{name} {method}: {}", reply.text());
            let problem = reply.json();
            assert_eq!(problem["code"], "not-found", "{name} {method}");
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains("without its quotes"), "{name}: {detail}");
        }
        for action in ["show", "purge"] {
            let out = keys_command(&gateway, &[action, "j", quoted]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name} {action}: {stderr}");
            assert!(stderr.starts_with("no records for this key"), "{stderr}");
            assert!(stderr.contains("without its quotes"), "{name}: {stderr}");
        }
        assert!(replayed(bare).await, "{name}");
    }
}

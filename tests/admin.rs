//! The admin plane: probes, the token matrix, key inspection and purge, reload.

mod common;

use std::time::Duration;

use common::admin::TOKEN_ENV;
use common::config::{Config, Route, Store, Upstream, raw};
use common::{GatewayProcess, MockUpstream, TestDir};

/// Everything but `[admin]`.
fn base() -> Config {
    Config::new()
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "5s")
        .defaults("retention", "1h")
        .route(Route::api("charges", "/v1/charges").set("required", true))
}

/// `/admin/*` guarded by the token in `IDEMGATE_TEST_ADMIN_TOKEN`.
fn config() -> Config {
    base().admin_token_env(TOKEN_ENV)
}

const TOKEN: &str = "s3cret-token";

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    common::admin::start_with_token(name, &config(), TOKEN).await
}

fn bearer() -> (&'static str, String) {
    ("authorization", common::admin::bearer(TOKEN))
}

/// The 404 of a disabled `/admin/*`: the admin plane's `not-found`, told
/// apart from a key with no record by its detail only.
fn disabled(problem: &serde_json::Value) -> bool {
    problem["code"] == "not-found" && problem["detail"].to_string().contains("disabled")
}

#[tokio::test]
async fn probes_and_metrics_need_no_token() {
    let (_dir, _upstream, gateway) = setup("probes").await;
    let admin = gateway.admin_client();
    assert_eq!(admin.get("/healthz").await.status, 200);
    assert_eq!(admin.get("/readyz").await.status, 200);
    for path in ["/healthz", "/readyz", "/metrics"] {
        let head = admin.send("HEAD", path, &[], "").await;
        assert_eq!(head.status, 200, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path}");
        // The length a GET's body has (RFC 9110 §9.3.2), as probes expect.
        let length = head.header("content-length").map(str::parse::<usize>);
        let get = admin.get(path).await;
        if path == "/metrics" {
            assert!(matches!(length, Some(Ok(n)) if n > 0), "HEAD {path}");
        } else {
            assert_eq!(length, Some(Ok(get.body.len())), "HEAD {path}");
        }
    }
    let metrics = admin.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.text().contains("idemgate_config_reloads_total"));
    // Before any request every route's counters read 0 (an alert on the
    // first mismatch needs the series to exist before it), and so does its
    // in-flight gauge.
    for line in [
        "idemgate_requests_total{outcome=\"mismatch\",route=\"charges\"} 0",
        "idemgate_requests_total{outcome=\"replayed\",route=\"charges\"} 0",
        "idemgate_inflight{route=\"charges\"} 0",
    ] {
        assert!(
            metrics.text().contains(line),
            "missing `{line}`:\n{}",
            metrics.text()
        );
    }
    // A store that never failed still shows its error counters, at 0.
    assert!(
        metrics
            .text()
            .contains("idemgate_store_errors_total{backend=\"embedded\",op=\"reserve\"} 0"),
        "{}",
        metrics.text()
    );
}

#[tokio::test]
async fn admin_token_matrix() {
    let (_dir, _upstream, gateway) = setup("auth").await;
    let admin = gateway.admin_client();
    let path = "/admin/keys/charges/nope";
    let none = admin.send("GET", path, &[], "").await;
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["code"], "unauthorized");
    // RFC 9110 §15.5.2: a 401 says which scheme it wants.
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    let wrong = admin
        .send("GET", path, &[("authorization", "Bearer guess")], "")
        .await;
    assert_eq!(wrong.status, 403);
    assert_eq!(wrong.json()["code"], "forbidden");
    let (name, value) = bearer();
    let right = admin.send("GET", path, &[(name, &value)], "").await;
    assert_eq!(right.status, 404, "authorized, but no such key");
    assert_eq!(right.json()["code"], "not-found");

    // Without a configured token the admin API does not exist.
    let dir = TestDir::new("no-token");
    let upstream = MockUpstream::start().await;
    let bare = GatewayProcess::start(&dir, &upstream.url(), &config());
    let reply = bare
        .admin_client()
        .send("GET", path, &[(name, &value)], "")
        .await;
    assert_eq!(reply.status, 404);
}

/// `Authorization` is one credential, not a list (RFC 9110 §11.6.2): two
/// field lines are one field `a, b`, never one bearer token, whichever of
/// them holds the token. Taking the first let a request through that a
/// proxy in front, reading the last, would have judged on another token.
#[tokio::test]
async fn two_authorization_fields_are_no_bearer_token() {
    let (_dir, _upstream, gateway) = setup("auth-twice").await;
    let admin = gateway.admin_client();
    let path = "/admin/keys/charges/nope";
    let (name, value) = bearer();
    for pair in [
        [value.as_str(), "Bearer guess"],
        ["Bearer guess", value.as_str()],
        [value.as_str(), value.as_str()],
    ] {
        let reply = admin
            .send("GET", path, &[(name, pair[0]), (name, pair[1])], "")
            .await;
        assert_eq!(reply.status, 401, "{pair:?}");
        assert_eq!(reply.json()["code"], "unauthorized", "{pair:?}");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    }
    let once = admin.send("GET", path, &[(name, &value)], "").await;
    assert_eq!(once.status, 404, "authorized, but no such key");
}

/// docs/operating.md: a caller refused for its token is logged, so that an
/// operator sees someone guessing tokens or a script left on an old one: a
/// WARN line naming the reason and the client's address, never the token
/// nor the path (a key), and at most one line per reason and interval
/// however many requests are refused.
#[tokio::test]
async fn a_refused_token_is_logged_once_per_interval_never_the_token() {
    const GUESS: &str = "guess-7f3a9c21";
    let (_dir, _upstream, gateway) = setup("auth-log").await;
    let admin = gateway.admin_client();
    let path = "/admin/keys/charges/key-b81c4e";
    let wrong = format!("Bearer {GUESS}");
    for _ in 0..20 {
        let reply = admin
            .send("GET", path, &[("authorization", &wrong)], "")
            .await;
        assert_eq!(reply.status, 403);
        assert_eq!(admin.send("DELETE", path, &[], "").await.status, 401);
    }
    let log = gateway.log_text();
    let refused: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("admin request refused"))
        .collect();
    assert_eq!(refused.len(), 2, "{log}");
    for (line, reason) in refused
        .iter()
        .zip(["token matches none", "no bearer token"])
    {
        for part in ["WARN", reason, "client=127.0.0.1:", "not logged"] {
            assert!(line.contains(part), "{part} not in {line}");
        }
    }
    assert!(!log.contains(GUESS), "the token is logged:\n{log}");
    assert!(!log.contains("key-b81c4e"), "the path is logged:\n{log}");
    // The right token is not refused, and logs nothing of the kind.
    let (name, value) = bearer();
    assert_eq!(
        admin.send("GET", path, &[(name, &value)], "").await.status,
        404
    );
    let log = gateway.log_text();
    assert_eq!(log.matches("admin request refused").count(), 2, "{log}");
}

/// docs/operating.md: `POST /admin/reload` reads the file the gateway was
/// started with, and `GET /admin/routes` shows every route: neither takes a
/// body or a query. A script that posts a new config as the body, or asks
/// `?dry_run=1`, is refused (400) rather than answered 200 "reloaded" for a
/// reload of the file on disk it did not mean; nothing is reloaded.
#[tokio::test]
async fn a_reload_with_a_body_or_a_query_is_refused_and_reloads_nothing() {
    let (_dir, _upstream, gateway) = setup("reload-body").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let posted = "[server]\nlisten = \"127.0.0.1:1\"\n";
    let with_body = admin.send("POST", "/admin/reload", &auth, posted).await;
    assert_eq!(with_body.status, 400, "{}", with_body.text());
    assert_eq!(
        with_body.header("content-type"),
        Some("application/problem+json")
    );
    let problem = with_body.json();
    assert_eq!(problem["code"], "bad-request", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("takes no body"),
        "{problem}"
    );
    for path in ["/admin/reload?dry_run=1", "/admin/reload?"] {
        let reply = admin.send("POST", path, &auth, "").await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(reply.json()["code"], "invalid-query", "{path}");
    }
    for path in ["/admin/routes?name=charges", "/admin/routes?"] {
        let reply = admin.send("GET", path, &auth, "").await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.text());
        assert_eq!(reply.json()["code"], "invalid-query", "{path}");
    }
    let metrics = admin.get("/metrics").await.text();
    assert!(
        !metrics.contains("idemgate_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(!gateway.log_text().contains("configuration reloaded"));
    // Without them, both answer.
    let reload = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let routes = admin.send("GET", "/admin/routes", &auth, "").await;
    assert_eq!(routes.status, 200, "{}", routes.text());
    // The token is still checked first.
    let none = admin.send("POST", "/admin/reload", &[], posted).await;
    assert_eq!(none.status, 401);
}

/// Some HTTP clients send every POST with `Transfer-Encoding: chunked`, an
/// empty one as a lone last chunk: that is no body, and the reload runs. A
/// chunked body with bytes in it is still refused, and so is one that does
/// not end.
#[tokio::test]
async fn a_reload_with_an_empty_chunked_body_reloads() {
    let (_dir, _upstream, gateway) = setup("reload-chunked").await;
    let (_, value) = bearer();
    let head = format!(
        "POST /admin/reload HTTP/1.1\r\nHost: a\r\nAuthorization: {value}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let empty = format!("{head}0\r\n\r\n");
    let reply =
        common::raw::exchange(gateway.admin, empty.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(200), "{reply:?}");
    assert!(gateway.log_text().contains("configuration reloaded"));

    let posted = format!("{head}5\r\n[x]\n\r\n0\r\n\r\n");
    let reply =
        common::raw::exchange(gateway.admin, posted.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert!(reply.body().contains("takes no body"), "{reply:?}");

    let unended = head.clone();
    let reply =
        common::raw::exchange(gateway.admin, unended.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert_eq!(
        gateway.log_text().matches("configuration reloaded").count(),
        1
    );
}

/// docs/operating.md: a route name the running config lacks (most likely
/// misspelt) is said so, as `idemgate keys` says it: a key with no record
/// there, its purge, and a first page with no record are 404 `not-found`
/// whose detail names the cause, not an empty 200 listing that a
/// reconciliation script reads as "no outcome_unknown records". A route
/// since renamed keeps its records under its old name until they expire:
/// they are still listed, shown and purged.
#[tokio::test]
async fn a_route_the_config_lacks_is_said_so() {
    let (_dir, _upstream, gateway) = setup("unknown-route").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let stored = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(stored.status, 201);
    for (method, path) in [
        ("GET", "/admin/keys/charge/k1"),
        ("DELETE", "/admin/keys/charge/k1"),
        ("GET", "/admin/keys/charge"),
        ("GET", "/admin/keys/charge?state=outcome_unknown"),
        // Names no route can have (not UTF-8, a NUL, empty): the same answer.
        ("GET", "/admin/keys/%FF/k1"),
        ("DELETE", "/admin/keys/%FF/k1"),
        ("GET", "/admin/keys/%FF"),
        ("HEAD", "/admin/keys/%FF"),
        ("GET", "/admin/keys/char%00ges/k1"),
        ("GET", "/admin/keys//k1"),
    ] {
        let reply = admin.send(method, path, &auth, "").await;
        assert_eq!(reply.status, 404, "{method} {path}: {}", reply.text());
        if method == "HEAD" {
            assert_eq!(
                reply.header("content-type"),
                Some("application/problem+json")
            );
            continue;
        }
        let problem = reply.json();
        assert_eq!(problem["code"], "not-found", "{method} {path}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("no route of this name"),
            "{method} {path}: {detail}"
        );
    }
    // And the checks before the look-up, as for any route name.
    for (method, path, status) in [
        ("PUT", "/admin/keys/%FF/k1", 405),
        ("POST", "/admin/keys/%FF", 405),
        ("GET", "/admin/keys/%FF/k1?x", 400),
        ("GET", "/admin/keys/%FF?limit=0", 400),
        ("GET", "/admin/keys/%FF/a%09b", 400),
    ] {
        let reply = admin.send(method, path, &auth, "").await;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.text());
        let same = admin
            .send(method, &path.replace("%FF", "charge"), &auth, "")
            .await;
        assert_eq!(reply.json(), same.json(), "{method} {path}");
    }
    // A known route's empty answers stay as they were.
    let none = admin.send("GET", "/admin/keys/charges/k2", &auth, "").await;
    assert_eq!(none.json()["detail"], "Nothing here.");
    let empty = admin
        .send("GET", "/admin/keys/charges?state=in_flight", &auth, "")
        .await;
    assert_eq!(empty.status, 200, "{}", empty.text());
    assert_eq!(empty.json()["records"], serde_json::json!([]));

    // Renamed by a reload: the old name's records are still there.
    gateway.write_config(&config().rename_route("charges", "payments"));
    let reload = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    let listed = admin.send("GET", "/admin/keys/charges", &auth, "").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["records"][0]["key"], "k1");
    let shown = admin.send("GET", "/admin/keys/charges/k1", &auth, "").await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    let purged = admin
        .send("DELETE", "/admin/keys/charges/k1", &auth, "")
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    let gone = admin.send("GET", "/admin/keys/charges", &auth, "").await;
    assert_eq!(gone.status, 404, "{}", gone.text());
}

/// docs/operating.md, "Slow clients": the admin plane holds its connections
/// to the data plane's `header_read_timeout`. Heads that never complete,
/// as many as `max_connections`, are cut off by it: the probes behind them
/// are answered once they are, not starved for good. A reload whose body
/// trickles is refused without waiting for it (a reload takes none).
#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_on_the_admin_plane_are_cut_off() {
    let config = config()
        .server("header_read_timeout", "1s")
        .server("max_connections", 4);
    let (_dir, _upstream, gateway) =
        common::admin::start_with_token("admin-slow", &config, TOKEN).await;
    let started = std::time::Instant::now();
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(gateway.admin).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET /healthz HTTP/1.1\r\nHost: a\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    let probe = tokio::time::timeout(
        Duration::from_secs(10),
        gateway.admin_client().get("/healthz"),
    )
    .await
    .expect("/healthz starved behind heads that never complete");
    assert_eq!(probe.status, 200);
    for stream in &mut slow {
        assert!(common::raw::wait_closed(stream, Duration::from_secs(5)).await);
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    let (_, value) = bearer();
    let request = format!(
        "POST /admin/reload HTTP/1.1\r\nHost: a\r\nAuthorization: {value}\r\nContent-Length: 100000\r\n\r\nx"
    );
    let reply =
        common::raw::exchange(gateway.admin, request.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert!(reply.body().contains("takes no body"), "{reply:?}");
    assert!(!gateway.log_text().contains("configuration reloaded"));
}

/// A token written inline in the config (docs/configuration.md: secrets *can* be given
/// as `*_env`) guards `/admin/*` the same way.
#[tokio::test]
async fn an_inline_admin_token_guards_the_admin_plane() {
    let dir = TestDir::new("inline-token");
    let upstream = MockUpstream::start().await;
    let config = base().admin("token", TOKEN);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let admin = gateway.admin_client();
    let path = "/admin/keys/charges/nope";
    assert_eq!(admin.send("GET", path, &[], "").await.status, 401);
    let wrong = admin
        .send("GET", path, &[("authorization", "Bearer guess")], "")
        .await;
    assert_eq!(wrong.status, 403);
    let (name, value) = bearer();
    let right = admin.send("GET", path, &[(name, &value)], "").await;
    assert_eq!(right.status, 404, "authorized, but no such key");
    assert_eq!(right.json()["code"], "not-found");
}

/// A head whose field held control characters reaches the admin plane
/// without that field: refused (400), not acted on as if it had not been
/// sent, with the right token beside it or not.
#[tokio::test]
async fn a_field_with_control_characters_is_refused_on_the_admin_plane() {
    let (_dir, _upstream, gateway) = setup("admin-ctl").await;
    let (_, value) = bearer();
    let request = format!(
        "DELETE /admin/keys/charges/k HTTP/1.1\r\nHost: a\r\nAuthorization: {value}\r\nX-Note: a\x01b\r\n\r\n"
    );
    let reply =
        common::raw::exchange(gateway.admin, request.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert!(reply.body().contains("control characters"), "{reply:?}");
}

/// A path the admin plane serves, asked with a method it does not answer:
/// 405 problem+json `method-not-allowed` with `Allow`, not 404. Under
/// `/admin/*` the token rules come first (401, 403, 404 when disabled), so a
/// caller without the token learns nothing about the paths.
#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let (_dir, _upstream, gateway) = setup("method").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    // (method, path, with the token, Allow)
    let cases = [
        ("POST", "/healthz", false, "GET, HEAD"),
        ("DELETE", "/readyz", false, "GET, HEAD"),
        ("PUT", "/metrics", false, "GET, HEAD"),
        ("POST", "/healthz", true, "GET, HEAD"),
        ("GET", "/admin/reload", true, "POST"),
        ("PUT", "/admin/keys/charges/k", true, "GET, HEAD, DELETE"),
        ("POST", "/admin/keys/charges/k", true, "GET, HEAD, DELETE"),
    ];
    for (method, path, token, allow) in cases {
        let headers: &[(&str, &str)] = if token { &auth } else { &[] };
        let reply = admin.send(method, path, headers, "").await;
        assert_eq!(reply.status, 405, "{method} {path}: {}", reply.text());
        assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json"),
            "{method} {path}"
        );
        let problem = reply.json();
        assert_eq!(problem["code"], "method-not-allowed", "{method} {path}");
        assert_eq!(problem["status"], 405, "{method} {path}");
    }
    // HEAD is GET without the body, on the key resource as on the probes.
    let head = admin.send("HEAD", "/admin/keys/charges/k", &auth, "").await;
    assert_eq!(head.status, 404, "{}", head.text());
    assert!(head.text().is_empty(), "{}", head.text());
    let get = admin.send("GET", "/admin/keys/charges/k", &auth, "").await;
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    // The token is checked before the method under /admin/*.
    for (method, path) in [("GET", "/admin/reload"), ("PUT", "/admin/keys/charges/k")] {
        let none = admin.send(method, path, &[], "").await;
        assert_eq!(none.status, 401, "{method} {path}");
        let wrong = admin
            .send(method, path, &[("authorization", "Bearer guess")], "")
            .await;
        assert_eq!(wrong.status, 403, "{method} {path}");
    }
    // Paths that do not exist stay 404 whatever the method.
    for (method, path) in [("POST", "/nowhere"), ("PUT", "/admin/nowhere")] {
        let reply = admin.send(method, path, &auth, "").await;
        assert_eq!(reply.status, 404, "{method} {path}");
    }
    // With /admin/* disabled, it does not exist for any method.
    let dir = TestDir::new("method-no-token");
    let upstream = MockUpstream::start().await;
    let bare = GatewayProcess::start(&dir, &upstream.url(), &config());
    let reply = bare
        .admin_client()
        .send("GET", "/admin/reload", &auth, "")
        .await;
    assert_eq!(reply.status, 404);
    let reply = bare.admin_client().send("POST", "/healthz", &[], "").await;
    assert_eq!(reply.status, 405);
}

#[tokio::test]
async fn show_and_purge_a_key_then_it_runs_again() {
    let (_dir, upstream, gateway) = setup("keys").await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    client.post("/v1/charges", Some("order/7"), "{}").await;

    let shown = admin
        .send("GET", "/admin/keys/charges/order%2F7", &auth, "")
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    let records = shown.json();
    let record = &records[0];
    assert_eq!(records.as_array().unwrap().len(), 1);
    assert_eq!(record["state"], "completed");
    assert_eq!(record["status"], 201);
    assert!(record["scope"].is_string() && record["fingerprint"].is_string());
    for field in ["created_at", "completed_at", "expires_at"] {
        assert!(
            record[field].as_str().unwrap().ends_with('Z'),
            "{field}: {record}"
        );
    }
    assert!(record["lease_expires_at"].is_null());

    assert_eq!(
        admin
            .send("DELETE", "/admin/keys/charges/order%2F7", &auth, "")
            .await
            .status,
        204
    );
    assert_eq!(
        admin
            .send("DELETE", "/admin/keys/charges/order%2F7", &auth, "")
            .await
            .status,
        404
    );
    let again = client.post("/v1/charges", Some("order/7"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("order/7"), 2);
}

/// docs/operating.md: a purge that deletes records logs one info line with
/// the route, the key's short hash (as the data plane logs keys), how many
/// records and the client's address: an operator auditing who freed a key
/// finds it. Never the key itself; nothing for a purge that deleted nothing.
#[tokio::test]
async fn a_purge_is_logged_with_the_keys_hash_never_the_key() {
    const KEY: &str = "audit-key-5d1e0b";
    let (_dir, _upstream, gateway) = setup("purge-log").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let path = format!("/admin/keys/charges/{KEY}");
    let stored = gateway.client().post("/v1/charges", Some(KEY), "{}").await;
    assert_eq!(stored.status, 201);
    assert_eq!(admin.send("DELETE", &path, &auth, "").await.status, 204);
    assert_eq!(admin.send("DELETE", &path, &auth, "").await.status, 404);

    let log = gateway.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("key purged")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    let line = lines[0];
    for part in [
        "INFO",
        "route=\"charges\"",
        &format!("key={}", idemgate::key::short_hash(KEY)),
        "records=1",
        "by=\"admin api\"",
        "client=127.0.0.1:",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
    assert!(!log.contains(KEY), "the raw key is logged:\n{log}");
}

/// docs/operating.md: the key in the path is the key as stored, as the
/// listing shows it. `%22k1%22` is the key `"k1"` (which a JSON body can
/// give), never the key `k1` a header `"k1"` gives: here it finds nothing,
/// and its 404 says that a quoted key is stored without its quotes. A key
/// no source could give is 400 `invalid-key`, never quoted back.
#[tokio::test]
async fn the_key_in_the_path_is_the_key_as_stored() {
    let (_dir, upstream, gateway) = setup("key-syntax").await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    assert_eq!(
        client.post("/v1/charges", Some("k1"), "{}").await.status,
        201
    );

    let shown = admin.send("GET", "/admin/keys/charges/k1", &auth, "").await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    assert_eq!(shown.json()[0]["state"], "completed");
    // As stored: `"k1"` is no name of the key `k1` a header `"k1"` gives.
    for method in ["GET", "DELETE"] {
        let reply = admin
            .send(method, "/admin/keys/charges/%22k1%22", &auth, "")
            .await;
        assert_eq!(reply.status, 404, "{method}: {}", reply.text());
        let detail = reply.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("stored without its quotes"), "{detail}");
    }
    let purged = admin
        .send("DELETE", "/admin/keys/charges/k1", &auth, "")
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    let again = client.post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("k1"), 2);

    // Keys a query, form or JSON source can give, as the listing shows
    // them: none here.
    for key in ["%22k1", "a%20secret", "%22%22"] {
        let path = format!("/admin/keys/charges/{key}");
        let reply = admin.send("GET", &path, &auth, "").await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.text());
    }
    for (method, key) in [
        ("GET", "a%09secret"),
        ("GET", "%FF"),
        ("DELETE", &"k".repeat(256)),
    ] {
        let path = format!("/admin/keys/charges/{key}");
        let reply = admin.send(method, &path, &auth, "").await;
        assert_eq!(reply.status, 400, "{method} {path}: {}", reply.text());
        assert_eq!(reply.json()["code"], "invalid-key", "{method} {path}");
        assert!(!reply.text().contains("secret"), "{}", reply.text());
    }
    // Still the key rules after the token and the method.
    let reply = admin
        .send("GET", "/admin/keys/charges/%22k1", &[], "")
        .await;
    assert_eq!(reply.status, 401);
    let reply = admin
        .send("PUT", "/admin/keys/charges/%22k1", &auth, "")
        .await;
    assert_eq!(reply.status, 405);
}

/// A `?` in the path starts the query, so `/admin/keys/charges/order?7`
/// names the key `order`, not `order?7`: the key resource takes no query,
/// and one is refused (400 `invalid-query`, saying how to write a `?` in a
/// key) rather than read as part of no key. It used to show, and `DELETE`
/// to purge, the records of `order`, another key. Written `%3F`, the key
/// `order?7` is found and purged.
#[tokio::test]
async fn a_query_on_a_key_path_is_refused_not_a_shorter_key() {
    let (_dir, _upstream, gateway) = setup("key-query").await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    for key in ["order", "order?7"] {
        assert_eq!(
            client.post("/v1/charges", Some(key), "{}").await.status,
            201
        );
    }
    for method in ["GET", "HEAD", "DELETE"] {
        for path in [
            "/admin/keys/charges/order?7",
            "/admin/keys/charges/order?",
            "/admin/keys/charges/order?limit=1",
        ] {
            let reply = admin.send(method, path, &auth, "").await;
            assert_eq!(reply.status, 400, "{method} {path}: {}", reply.text());
            if method != "HEAD" {
                let problem = reply.json();
                assert_eq!(problem["code"], "invalid-query", "{method} {path}");
                assert!(
                    problem["detail"].as_str().unwrap().contains("%3F"),
                    "{problem}"
                );
            }
        }
    }
    // Both keys still stand; each is found by its own path.
    let order = admin
        .send("GET", "/admin/keys/charges/order", &auth, "")
        .await;
    assert_eq!(order.status, 200, "{}", order.text());
    let purged = admin
        .send("DELETE", "/admin/keys/charges/order%3F7", &auth, "")
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    let order = admin
        .send("GET", "/admin/keys/charges/order", &auth, "")
        .await;
    assert_eq!(order.status, 200, "the purge took `order?7` only");
    // The token and the method are checked first, as for any key path.
    let none = admin
        .send("GET", "/admin/keys/charges/order?7", &[], "")
        .await;
    assert_eq!(none.status, 401);
    let put = admin
        .send("PUT", "/admin/keys/charges/order?7", &auth, "")
        .await;
    assert_eq!(put.status, 405);
}

/// `server.max_header_bytes` and `max_headers` bound the admin plane's heads
/// as the data plane's: a head over either is 431 `header-too-large`
/// problem+json, over HTTP/1 and HTTP/2, on the probes as under `/admin/*`.
/// The admin plane read a head up to twice the limit (the connection's
/// buffer) as if it were within it.
#[tokio::test]
async fn a_head_over_the_limits_is_431_on_the_admin_plane() {
    let config = config().server("max_header_bytes", "4KiB");
    let (_dir, _upstream, gateway) =
        common::admin::start_with_token("admin-head", &config, TOKEN).await;
    let (_, value) = bearer();
    let pad = "p".repeat(5000);
    let many: String = (0..101).map(|i| format!("X-H{i}: v\r\n")).collect();
    for path in ["/healthz", "/admin/keys/charges/k"] {
        for extra in [format!("X-Pad: {pad}\r\n"), many.clone()] {
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: a\r\nAuthorization: {value}\r\n{extra}\r\n");
            let reply =
                common::raw::exchange(gateway.admin, request.as_bytes(), Duration::from_secs(5))
                    .await;
            assert_eq!(reply.status, Some(431), "{path}: {reply:?}");
            assert!(reply.body().contains("header-too-large"), "{reply:?}");
        }
        let mut h2 = common::h2::connect(gateway.admin).await;
        let request = http::Request::get(format!("http://a{path}"))
            .header("authorization", &value)
            .header("x-pad", &pad)
            .body(())
            .unwrap();
        let answer = common::h2::send(&mut h2, request).await;
        assert_eq!(answer.status(), 431, "{path}");
        let body = common::h2::body(answer).await;
        assert!(
            String::from_utf8_lossy(&body).contains("header-too-large"),
            "{path}"
        );
    }
    // Within the limits, the same paths answer.
    let small = gateway.admin_client().get("/healthz").await;
    assert_eq!(small.status, 200);
}

#[tokio::test]
async fn in_flight_record_shows_its_lease() {
    let (_dir, _upstream, gateway) = setup("inflight").await;
    let client = gateway.client();
    let slow = tokio::spawn(async move {
        client
            .post("/v1/charges?delay_ms=600", Some("slow"), "{}")
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (name, value) = bearer();
    let shown = gateway
        .admin_client()
        .send("GET", "/admin/keys/charges/slow", &[(name, &value)], "")
        .await;
    let record = &shown.json()[0];
    assert_eq!(record["state"], "in_flight");
    assert!(record["status"].is_null() && record["completed_at"].is_null());
    assert!(record["lease_expires_at"].is_string());
    // In flight, the record expires with its lease (docs/operating.md lists the
    // fields that are null in flight; this is not one).
    assert_eq!(record["expires_at"], record["lease_expires_at"], "{record}");
    slow.await.unwrap();
}

/// A record past its retention only awaits the sweep: the data plane runs
/// its key again, the listing leaves it out, and so do `GET` (404), `DELETE`
/// (404: nothing standing to purge), `keys show` and `keys purge` (exit 1,
/// "no records", as the API's 404 says; the purge still deletes it), before
/// the sweep has come (an hour away here).
#[tokio::test]
async fn a_record_past_its_retention_is_no_record_of_the_key() {
    let config = config()
        .with_store(|store| store.set("sweep_interval", "1h"))
        .with_route("charges", |route| route.set("retention", "1s"));
    let (_dir, upstream, gateway) =
        common::admin::start_with_token("expired", &config, TOKEN).await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    for key in ["old", "older"] {
        assert_eq!(
            client.post("/v1/charges", Some(key), "{}").await.status,
            201
        );
    }
    let path = "/admin/keys/charges/old";
    assert_eq!(admin.send("GET", path, &auth, "").await.status, 200);
    tokio::time::sleep(Duration::from_millis(1300)).await;

    let shown = admin.send("GET", path, &auth, "").await;
    assert_eq!(shown.status, 404, "{}", shown.text());
    assert_eq!(shown.json()["code"], "not-found");
    let listed = admin.send("GET", "/admin/keys/charges", &auth, "").await;
    assert_eq!(listed.json()["records"], serde_json::json!([]));
    let show = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["keys", "show", "-c"])
        .arg(gateway.config_path())
        .args(["charges", "old"])
        .output()
        .unwrap();
    assert_eq!(show.status.code(), Some(1), "{show:?}");
    assert!(
        String::from_utf8_lossy(&show.stderr).contains("no records"),
        "{show:?}"
    );
    let purged = admin.send("DELETE", path, &auth, "").await;
    assert_eq!(purged.status, 404, "{}", purged.text());
    let keys = |action: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["keys", action, "-c"])
            .arg(gateway.config_path())
            .args(["charges", "older"])
            .output()
            .unwrap()
    };
    let purge = keys("purge");
    let stderr = String::from_utf8_lossy(&purge.stderr);
    assert_eq!(purge.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no records"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&purge.stdout),
        "0 records deleted\n"
    );
    assert_eq!(keys("show").status.code(), Some(1));

    let again = client.post("/v1/charges", Some("old"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("old"), 2);
    assert_eq!(admin.send("GET", path, &auth, "").await.status, 200);
    assert_eq!(admin.send("DELETE", path, &auth, "").await.status, 204);
}

#[tokio::test]
async fn reload_applies_new_routes_and_retention_and_refuses_bad_files() {
    let (_dir, upstream, gateway) = setup("reload").await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    assert_eq!(
        client.post("/v1/refunds", Some("r"), "{}").await.status,
        404
    );

    // Traffic keeps flowing while the config is reloaded over and over.
    let load = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut failures = 0;
            for i in 0..200 {
                let reply = client
                    .post("/v1/charges", Some(&format!("load-{i}")), "{}")
                    .await;
                if reply.status != 201 {
                    failures += 1;
                }
            }
            failures
        })
    };

    let extended = config()
        .defaults("retention", "1s")
        .route(Route::api("refunds", "/v1/refunds"));
    gateway.write_config(&extended);
    for _ in 0..5 {
        let reply = admin.send("POST", "/admin/reload", &auth, "").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    // A route added by a reload has its counters at 0 before its first request.
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_requests_total{outcome=\"new\",route=\"refunds\"} 0"),
        "{metrics}"
    );
    assert_eq!(
        client.post("/v1/refunds", Some("r"), "{}").await.status,
        201
    );

    // The new retention applies to records completed after the reload.
    client.post("/v1/charges", Some("short-lived"), "{}").await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let again = client.post("/v1/charges", Some("short-lived"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("short-lived"), 2);

    // A broken file is refused whole; the running config stays.
    gateway.write_config(&extended.defaults("retention", "soon"));
    let refused = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(refused.status, 400);
    assert!(refused.text().contains("retention"), "{}", refused.text());
    assert_eq!(
        client.post("/v1/refunds", Some("r2"), "{}").await.status,
        201
    );

    // SIGHUP reloads too (and is refused the same way).
    gateway.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateway.write_config(&config());
    gateway.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        client.post("/v1/refunds", Some("r3"), "{}").await.status,
        404
    );

    assert_eq!(load.await.unwrap(), 0, "requests failed during reloads");
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"ok\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"rejected\"} 2"),
        "{metrics}"
    );
}

/// The config file as a FIFO: `open` hands over `text` once the gateway
/// has opened the file to read it and `release` is sent, so a reload waits
/// in its read for as long as the test likes.
struct SlowFile {
    opened: std::sync::mpsc::Receiver<()>,
    release: std::sync::mpsc::Sender<()>,
}

impl SlowFile {
    fn open(path: &std::path::Path, text: String) -> SlowFile {
        let _ = std::fs::remove_file(path);
        let made = std::process::Command::new("mkfifo").arg(path).status();
        assert!(made.unwrap().success(), "mkfifo {}", path.display());
        let (opened_tx, opened) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let path = path.to_owned();
        std::thread::spawn(move || {
            use std::io::Write;
            // Returns once a reader has the FIFO open.
            let mut fifo = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            let _ = opened_tx.send(());
            let _ = release_rx.recv();
            let _ = fifo.write_all(text.as_bytes());
        });
        SlowFile { opened, release }
    }

    /// Until the gateway's read has started.
    async fn wait_opened(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.opened.try_recv().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "no reload read the file"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A reload reads files (the config, certificates) with calls that block
/// their thread: made off the threads that serve requests, a reload that
/// waits on a slow file (a network mount) holds up no request, even on a
/// gateway with a single such thread, whether asked for by
/// `POST /admin/reload` or by SIGHUP.
#[tokio::test]
async fn a_reload_waiting_on_a_slow_file_holds_up_no_request() {
    let dir = TestDir::new("reload-slow-file");
    let upstream = MockUpstream::start().await;
    let envs = [(TOKEN_ENV, TOKEN), ("TOKIO_WORKER_THREADS", "1")];
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config(), &envs);
    let text = std::fs::read_to_string(gateway.config_path()).unwrap();
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    for (i, by_signal) in [(1, false), (2, true)] {
        let slow = SlowFile::open(gateway.config_path(), text.clone());
        let reload = if by_signal {
            gateway.signal("HUP");
            None
        } else {
            let admin = admin.clone();
            let auth = [(name, value.clone())];
            Some(tokio::spawn(async move {
                let auth = [(auth[0].0, auth[0].1.as_str())];
                admin.send("POST", "/admin/reload", &auth, "").await
            }))
        };
        slow.wait_opened().await;
        let served = tokio::time::timeout(
            Duration::from_secs(5),
            client.post("/v1/charges", Some(&format!("during-{i}")), "{}"),
        )
        .await;
        let served =
            served.unwrap_or_else(|_| panic!("held up by the reload (signal: {by_signal})"));
        assert_eq!(served.status, 201, "{}", served.text());
        let metrics = tokio::time::timeout(Duration::from_secs(5), admin.get("/metrics")).await;
        assert!(metrics.is_ok(), "/metrics held up by the reload");

        if by_signal {
            // SIGHUPs while a reload runs make one more after it, which
            // reads the file as it is then: not one each.
            gateway.signal("HUP");
            gateway.signal("HUP");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let path = gateway.config_path();
            std::fs::remove_file(path).unwrap();
            std::fs::write(path, &text).unwrap();
        }
        slow.release.send(()).unwrap();
        if let Some(reload) = reload {
            let reply = reload.await.unwrap();
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["status"], "reloaded");
        }
        let applied = if by_signal { i + 1 } else { i };
        let applied = format!("idemgate_config_reloads_total{{result=\"ok\"}} {applied}\n");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !admin.get("/metrics").await.text().contains(&applied) {
            assert!(
                std::time::Instant::now() < deadline,
                "reload {i} not applied"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"ok\"} 3\n"),
        "{metrics}"
    );
    // Nor does it hold up a shutdown: SIGTERM during a reload stuck in its
    // read stops the gateway as promptly as without one.
    let slow = SlowFile::open(gateway.config_path(), text);
    gateway.signal("HUP");
    slow.wait_opened().await;
    gateway.terminate_within(Duration::from_secs(5)).await;
}

/// Nor does one asked for by `POST /admin/reload`: the call waiting on it
/// is answered 503 `shutting-down` at SIGTERM, rather than holding the
/// admin plane, and so the process, open for the whole `shutdown_grace`.
#[tokio::test]
async fn a_reload_stuck_under_post_admin_reload_does_not_hold_up_a_shutdown() {
    let dir = TestDir::new("reload-stuck-shutdown");
    let upstream = MockUpstream::start().await;
    let config = config().server("shutdown_grace", "30s");
    let envs = [(TOKEN_ENV, TOKEN)];
    let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config, &envs);
    let text = std::fs::read_to_string(gateway.config_path()).unwrap();
    let slow = SlowFile::open(gateway.config_path(), text);
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let reload = tokio::spawn(async move {
        admin
            .send("POST", "/admin/reload", &[(name, value.as_str())], "")
            .await
    });
    slow.wait_opened().await;
    gateway.terminate_within(Duration::from_secs(5)).await;
    let reply = reload.await.unwrap();
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(reply.json()["code"], "shutting-down", "{}", reply.text());
}

/// A reload refuses what `check`, and so the next start, refuses, located
/// as `check` locates it: a store setting that only a restart applies, and
/// an upstream's CA file. Counted as rejected; the running config stays.
#[tokio::test]
async fn a_reload_refuses_what_a_restart_would_refuse_at_its_line() {
    let (dir, _upstream, gateway) = setup("reload-unusable").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let file = gateway.config_path().display().to_string();
    let missing = dir.path("missing-ca.pem");
    let store = config().store(Store::postgres(
        "postgres://app:hunter2@127.0.0.1:1/orders?sslmode=verify-ca",
    ));
    let upstream_ca = config().upstream(
        Upstream::new("billing", "https://127.0.0.1:1").tls("ca", missing.to_str().unwrap()),
    );
    for (broken, field) in [
        (store, "store.url"),
        (upstream_ca, "upstreams.billing.tls.ca"),
    ] {
        gateway.write_config(&broken);
        let reply = admin.send("POST", "/admin/reload", &auth, "").await;
        assert_eq!(reply.status, 400, "{field}: {}", reply.text());
        assert!(!reply.text().contains("hunter2"), "{}", reply.text());
        let error = reply.json()["errors"][0].as_str().unwrap().to_owned();
        // `FILE:LINE:COL: field: ...`
        let at = error
            .strip_prefix(&format!("{file}:"))
            .and_then(|rest| rest.split_once(&format!(": {field}: ")))
            .map(|(line_column, _)| line_column.to_owned());
        assert!(
            at.is_some_and(|at| at.split(':').all(|n| n.parse::<usize>().is_ok())),
            "{error}"
        );
    }
    let reply = gateway.client().post("/v1/charges", Some("k"), "{}").await;
    assert_eq!(reply.status, 201);
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"rejected\"} 2"),
        "{metrics}"
    );
}

/// The bytes of request bodies held at once are bounded by the
/// `max_buffered_bodies` the process started with (restart-only), so a
/// reload that raises `max_request_body` past it is refused: bodies of the
/// new size would be refused 503 `gateway-overloaded` on every try, however
/// long their clients retried. The running limits stay.
#[tokio::test]
async fn a_reload_cannot_raise_max_request_body_past_the_running_body_budget() {
    let started = config()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "96KiB");
    let (_dir, _upstream, gateway) =
        common::admin::start_with_token("reload-body-budget", &started, TOKEN).await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    // Written or not, the file's own budget is no help: this one is running.
    for raised in [
        config()
            .server("max_request_body", "128KiB")
            .server("max_buffered_bodies", "128KiB"),
        config().server("max_request_body", "128KiB"),
    ] {
        gateway.write_config(&raised);
        let reply = admin.send("POST", "/admin/reload", &auth, "").await;
        assert_eq!(reply.status, 400, "{}", reply.text());
        let error = reply.json()["errors"][0].as_str().unwrap().to_owned();
        assert!(
            error.contains("server.max_request_body")
                && error.contains("server.max_buffered_bodies")
                && error.contains("98304"),
            "{error}"
        );
    }
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(100 * 1024));
    let reply = gateway
        .client()
        .post("/v1/charges", Some("big"), &body)
        .await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    // Up to the running budget, it is taken.
    gateway.write_config(&started.clone().server("max_request_body", "96KiB"));
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(90 * 1024));
    let reply = gateway
        .client()
        .post("/v1/charges", Some("big"), &body)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
}

#[tokio::test]
async fn reload_notes_compare_with_what_the_process_started_with() {
    let (_dir, _upstream, gateway) = setup("reload-notes").await;
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    gateway.write_config(&config().server("header_read_timeout", "7s"));
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().contains("takes effect only after a restart"),
        "{}",
        reply.text()
    );
    // The head limits size each connection's parser when the listener starts.
    for (limit, value) in [
        ("max_headers", raw("500")),
        ("max_header_bytes", "64KiB".into()),
    ] {
        gateway.write_config(&config().server(limit, value));
        let reply = admin.send("POST", "/admin/reload", &auth, "").await;
        assert!(
            reply.text().contains("server connection limits changed"),
            "{limit}: {}",
            reply.text()
        );
    }
    // Records are kept per route name: renaming one leaves its answers behind.
    let renamed = config().rename_route("charges", "payments");
    gateway.write_config(&renamed);
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply
            .text()
            .contains("route \\\"charges\\\" is no longer an idempotent route"),
        "{}",
        reply.text()
    );
    // A record is found by its scope and matched by its fingerprint.
    let rescoped = renamed.with_route("payments", |r| {
        r.set("scope", raw("[]")).set("fingerprint", ["body"])
    });
    gateway.write_config(&rescoped);
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    for part in ["scope changed", "fingerprint changed"] {
        assert!(reply.text().contains(part), "{part}: {}", reply.text());
    }
    // Back to the file it started with: nothing is waiting for a restart.
    gateway.write_config(&config());
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        !reply.text().contains("restart"),
        "a note about a setting that is in effect: {}",
        reply.text()
    );
}

#[tokio::test]
async fn request_id_is_forwarded_or_generated() {
    let (_dir, upstream, gateway) = setup("request-id").await;
    let client = gateway.client();
    client
        .send(
            "POST",
            "/v1/charges",
            &[
                ("idempotency-key", "raw-key-5cbe"),
                ("x-request-id", "req-abc"),
            ],
            "{}",
        )
        .await;
    assert_eq!(
        upstream.last_header("x-request-id").as_deref(),
        Some("req-abc")
    );
    client.post("/v1/charges", Some("raw-key-8d1a"), "{}").await;
    let generated = upstream.last_header("x-request-id").unwrap();
    assert_eq!(generated.len(), 32);
    let log = gateway.log_text();
    assert!(log.contains("req-abc") && log.contains(&generated));
    // Keys no file name can hold: the log quotes the config's path.
    assert!(
        !log.contains("raw-key-5cbe") && !log.contains("raw-key-8d1a"),
        "raw keys never appear in logs"
    );
}

/// `/admin/*` with no token is disabled, and says so: one log line at start
/// naming the variable and why, and the admin plane's 404 `not-found` whose
/// detail is not that of a key with no record.
#[tokio::test]
async fn a_disabled_admin_api_says_why_in_the_log_and_the_answer() {
    let (name, value) = bearer();
    for (env, why) in [
        (None, "IDEMGATE_TEST_ADMIN_TOKEN, which is not set"),
        (Some(" \n"), "IDEMGATE_TEST_ADMIN_TOKEN, which is empty"),
    ] {
        let dir = TestDir::new("admin-disabled");
        let upstream = MockUpstream::start().await;
        let envs: Vec<(&str, &str)> = env
            .map(|value| ("IDEMGATE_TEST_ADMIN_TOKEN", value))
            .into_iter()
            .collect();
        let gateway = GatewayProcess::start_with_env(&dir, &upstream.url(), &config(), &envs);
        let reply = gateway
            .admin_client()
            .send("GET", "/admin/keys/charges/nope", &[(name, &value)], "")
            .await;
        assert_eq!(reply.status, 404, "{}", reply.text());
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        let problem = reply.json();
        assert_eq!(problem["code"], "not-found", "{problem}");
        assert_eq!(problem["type"], "not-found", "{problem}");
        let words = problem["detail"].to_string();
        assert!(words.contains("disabled"), "{words}");
        assert!(!words.contains("Nothing here"), "{words}");
        // The caller is not told which variable guards the API; the log is.
        assert!(!words.contains("IDEMGATE_TEST_ADMIN_TOKEN"), "{words}");
        let log = gateway.log_text();
        let lines: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("/admin/* is disabled"))
            .collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0].contains(why), "{log}");
    }
    // With the token, a key with no record is `not-found` too, in its own words.
    let (_dir, _upstream, gateway) = setup("admin-enabled").await;
    assert!(!gateway.log_text().contains("/admin/* is disabled"));
    let reply = gateway
        .admin_client()
        .send("GET", "/admin/keys/charges/nope", &[(name, &value)], "")
        .await;
    assert_eq!(reply.json()["code"], "not-found");
    assert!(!reply.json()["detail"].to_string().contains("disabled"));
}

/// A reload reads the token variable the file names again, as it re-reads
/// certificates: by SIGHUP and by `POST /admin/reload`.
#[tokio::test]
async fn a_reload_reads_the_admin_token_variable_again() {
    let dir = TestDir::new("admin-token-reload");
    let upstream = MockUpstream::start().await;
    // Started naming a variable it was not given: disabled.
    let unset = base().admin_token_env("IDEMGATE_TEST_OTHER_TOKEN");
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &unset,
        &[("IDEMGATE_TEST_ADMIN_TOKEN", TOKEN)],
    );
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let path = "/admin/keys/charges/nope";
    assert!(disabled(&admin.send("GET", path, &auth, "").await.json()));
    // The file now names the variable the process has: SIGHUP enables it.
    gateway.write_config(&config());
    gateway.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let reply = admin.send("GET", path, &auth, "").await;
        if reply.status == 404 && !disabled(&reply.json()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not enable /admin/*: {}\n{}",
            reply.text(),
            gateway.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And the reload endpoint disables it again, saying why in the log.
    gateway.write_config(&unset);
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // The caller is told the API goes away, not which variable guards it.
    assert!(
        reply.text().contains("/admin/* is turned off"),
        "{}",
        reply.text()
    );
    assert!(
        !reply.text().contains("IDEMGATE_TEST_OTHER_TOKEN"),
        "{}",
        reply.text()
    );
    let reply = admin.send("GET", path, &auth, "").await;
    assert!(disabled(&reply.json()), "{}", reply.text());
    let log = gateway.log_text();
    let lines = log
        .lines()
        .filter(|line| line.contains("IDEMGATE_TEST_OTHER_TOKEN, which is not set"))
        .count();
    assert_eq!(lines, 2, "once at start, once at the reload:\n{log}");
}

/// `token_env` as a list: a token from any listed variable is accepted; a
/// wrong one is 403 and none 401, as with one variable. A listed variable
/// the process lacks is warned about at start, by name.
#[tokio::test]
async fn every_token_of_a_listed_variable_is_accepted() {
    const OLD_ENV: &str = "IDEMGATE_TEST_ADMIN_TOKEN_OLD";
    const OLD: &str = "0ld-token-0123456789";
    const GONE_ENV: &str = "IDEMGATE_TEST_ADMIN_TOKEN_GONE";
    let dir = TestDir::new("admin-token-list");
    let upstream = MockUpstream::start().await;
    let listed = base().admin("token_env", [TOKEN_ENV, OLD_ENV, GONE_ENV]);
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &listed,
        &[(TOKEN_ENV, TOKEN), (OLD_ENV, OLD)],
    );
    let admin = gateway.admin_client();
    let path = "/admin/routes";
    for token in [TOKEN, OLD] {
        let auth = common::admin::bearer(token);
        let reply = admin
            .send("GET", path, &[("authorization", &auth)], "")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let wrong = common::admin::bearer("s3cret-token-0ld");
    let reply = admin
        .send("GET", path, &[("authorization", &wrong)], "")
        .await;
    assert_eq!(reply.status, 403, "{}", reply.text());
    assert_eq!(admin.send("GET", path, &[], "").await.status, 401);
    let log = gateway.log_text();
    assert!(!log.contains("/admin/* is disabled"), "{log}");
    assert!(
        log.contains(&format!(
            "admin.token_env[2]: {GONE_ENV} is not set or empty"
        )),
        "{log}"
    );
    assert!(!log.contains(TOKEN) && !log.contains(OLD), "{log}");
}

/// docs/operating.md, "Rotating the admin token", by reload: a gateway
/// started with the next token in a second variable lists both, so that
/// both are accepted while the callers move, then lists the new one alone;
/// the old token is refused from then on.
#[tokio::test]
async fn the_admin_token_rotates_by_a_reload_to_a_second_variable() {
    const NEXT_ENV: &str = "IDEMGATE_TEST_ADMIN_TOKEN_NEXT";
    const NEXT: &str = "n3xt-token-0123456789";
    let dir = TestDir::new("admin-token-rotate");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &config(),
        &[(TOKEN_ENV, TOKEN), (NEXT_ENV, NEXT)],
    );
    let admin = gateway.admin_client();
    let old = common::admin::bearer(TOKEN);
    let new = common::admin::bearer(NEXT);
    let old_auth = [("authorization", old.as_str())];
    let new_auth = [("authorization", new.as_str())];
    let path = "/admin/routes";
    assert_eq!(admin.send("GET", path, &old_auth, "").await.status, 200);
    assert_eq!(admin.send("GET", path, &new_auth, "").await.status, 403);

    // Both listed: either is accepted while the callers move.
    gateway.write_config(&base().admin("token_env", [NEXT_ENV, TOKEN_ENV]));
    let reply = admin.send("POST", "/admin/reload", &old_auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(admin.send("GET", path, &old_auth, "").await.status, 200);
    assert_eq!(admin.send("GET", path, &new_auth, "").await.status, 200);

    // The old one dropped, by a reload the new token authorizes.
    gateway.write_config(&base().admin_token_env(NEXT_ENV));
    let reply = admin.send("POST", "/admin/reload", &new_auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(admin.send("GET", path, &old_auth, "").await.status, 403);
    let reply = admin.send("GET", path, &new_auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// A request reserved before a reload completes under the config it started
/// with: its record keeps the old retention and its answer the old marker and
/// no expiry header, while a request started after the reload gets the new
/// ones (docs/operating.md, "A request in flight during a reload").
#[tokio::test]
async fn a_request_in_flight_across_a_reload_completes_under_its_old_policy() {
    let short = config().with_route("charges", |route| route.set("retention", "1s"));
    let (_dir, upstream, gateway) =
        common::admin::start_with_token("inflight", &short, TOKEN).await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];

    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=1200", Some("slow"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateway.write_config(&config().with_route("charges", |route| {
        route
            .set("replay_values", ["new", "cached"])
            .set("expiry_header", "Idempotency-Expires")
    }));
    let reply = admin.send("POST", "/admin/reload", &auth, "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    let slow = slow.await.unwrap();
    assert_eq!(slow.status, 201);
    assert_eq!(slow.header("idempotent-replayed"), Some("false"));
    assert_eq!(slow.header("idempotency-expires"), None);
    let fresh = client.post("/v1/charges", Some("fresh"), "{}").await;
    assert_eq!(fresh.header("idempotent-replayed"), Some("new"));
    assert!(fresh.header("idempotency-expires").is_some());

    // Past the old retention of one second: the record reserved before the
    // reload has expired, the one made after it (1h) replays.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let again = client.post("/v1/charges", Some("slow"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("new"));
    assert_eq!(upstream.executions("slow"), 2);
    let again = client.post("/v1/charges", Some("fresh"), "{}").await;
    assert_eq!(again.header("idempotent-replayed"), Some("cached"));
    assert_eq!(upstream.executions("fresh"), 1);
}

/// A request whose key is purged while it runs cannot record its answer; the
/// log says the key was purged or taken over (it said "taken over by another
/// request" alone, sending an operator who had purged it looking for one).
#[tokio::test]
async fn an_answer_fenced_off_by_a_purge_says_it_may_have_been_purged() {
    let (_dir, _upstream, gateway) = setup("purge-in-flight").await;
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let client = gateway.client();
    let running = tokio::spawn(async move {
        client
            .post("/v1/charges?delay_ms=1500", Some("p-1"), "{}")
            .await
    });
    let admin = gateway.admin_client();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let purged = admin
            .send("DELETE", "/admin/keys/charges/p-1", &auth, "")
            .await;
        if purged.status == 204 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", purged.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running.await.unwrap().status, 201);
    let log = gateway.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("answer not recorded"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("purged"), "{line}");
}

/// A refused reload is one log line per problem, however the file writes
/// its table keys: a key holding a newline and a terminal escape (TOML
/// `\n`, `\u001b`) is escaped in the line, never a line of its own.
#[tokio::test]
async fn a_refused_reload_logs_a_table_key_escaped_on_its_line() {
    let (_dir, _upstream, gateway) = setup("reload-control-keys").await;
    let (name, value) = bearer();
    let auth = [(name, value.as_str())];
    let file = format!(
        "{}\n[upstreams.\"x\\u001b[31m\\n2026-12-03T12:00:00Z  INFO forged\"]\nurl = \"http://127.0.0.1:1\"\n",
        config().toml()
    );
    gateway.write_config(&file);
    let reload = gateway
        .admin_client()
        .send("POST", "/admin/reload", &auth, "")
        .await;
    assert_eq!(reload.status, 400, "{}", reload.text());
    let line = gateway
        .logged_line("reload refused", Duration::from_secs(5))
        .await
        .expect("the refusal is logged");
    assert!(
        line.contains("upstreams.x\\u{1b}[31m\\n2026-12-03T12:00:00Z  INFO forged:"),
        "{line}"
    );
    let log = gateway.log_text();
    assert!(!log.contains('\u{1b}'), "{log:?}");
    assert!(
        !log.lines()
            .any(|line| line.starts_with("2026-12-03T12:00:00Z")),
        "{log}"
    );
}

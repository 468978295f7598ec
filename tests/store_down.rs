//! The store unreachable, as the gateway answers it: `on_store_error =
//! "reject"` fails closed with 503 + Retry-After and forwards nothing;
//! `"pass"` forwards without a record and says so; both are counted.

mod common;
mod pg_support;

use std::time::{Duration, Instant};

use common::config::{Config, Route, Store, Upstream};
use common::{GatewayProcess, MockUpstream, TestDir};
use pg_support::TestSchema;
use pg_support::switch::Switch;

/// Postgres at `url` (through a `Switch`). Connecting and statements get
/// 5 s: an outage here is a cut relay, refused or dropped at once, so no
/// assertion waits on these timeouts, and a loaded machine can take more
/// than half a second to open the first connection at start.
fn config(url: &str) -> Config {
    config_leasing(url, "10s")
}

fn config_leasing(url: &str, lock_timeout: &str) -> Config {
    config_pooled(url, lock_timeout, 4)
}

fn config_pooled(url: &str, lock_timeout: &str, pool_size: u32) -> Config {
    Config::new()
        .store(
            Store::postgres(url)
                .set("pool_size", pool_size)
                .set("connect_timeout", "5s")
                .set("statement_timeout", "5s"),
        )
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", lock_timeout)
        .route(Route::api("strict", "/v1/charges").set("on_store_error", "reject"))
        .route(Route::api("lenient", "/v1/events").set("on_store_error", "pass"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_rejects_or_passes_as_configured_and_counts_it() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("store-down");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&url));
    let client = gateway.client();
    let admin = gateway.admin_client();
    assert_eq!(
        client.post("/v1/events", Some("before"), "{}").await.status,
        201
    );

    switch.cut();
    let rejected = client.post("/v1/charges", Some("s-1"), "{}").await;
    assert_eq!(rejected.status, 503, "{}", rejected.text());
    assert_eq!(rejected.json()["code"], "store-unavailable");
    let detail = rejected.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("cannot be reached"), "{detail}");
    let retry_after: u64 = rejected.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert!(rejected.header("idempotent-replayed").is_none());
    assert_eq!(
        upstream.executions("s-1"),
        0,
        "fail closed: nothing forwarded"
    );

    let passed = client.post("/v1/events", Some("p-1"), "{}").await;
    assert_eq!(passed.status, 201, "{}", passed.text());
    assert_eq!(passed.header("idempotency-degraded"), Some("true"));
    assert!(passed.header("idempotent-replayed").is_none());
    assert_eq!(upstream.executions("p-1"), 1);
    // The gateway's own answer when the upstream fails says so too: no
    // record was kept, so a retry runs again.
    let timed_out = client
        .post("/v1/events?delay_ms=2500", Some("p-2"), "{}")
        .await;
    assert_eq!(timed_out.status, 504, "{}", timed_out.text());
    assert_eq!(timed_out.json()["code"], "upstream-timeout");
    assert_eq!(timed_out.header("idempotency-degraded"), Some("true"));
    assert!(timed_out.header("idempotent-replayed").is_none());
    let ready = admin.get("/readyz").await;
    assert_eq!(ready.status, 503);
    // The log and `/readyz` name the server the pool could not reach,
    // never the URL (it may carry a password).
    let dialed = format!("postgres at {}: ", switch.addr);
    assert!(ready.text().contains(&dialed), "{}", ready.text());
    let logged = gateway
        .logged_line(&dialed, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("{}", gateway.log_text()));
    assert!(logged.contains("store unavailable"), "{logged}");
    assert!(!gateway.log_text().contains("postgres://"));

    let metrics = admin.get("/metrics").await.text();
    for line in [
        "idemgate_requests_total{outcome=\"store_unavailable\",route=\"strict\"} 1",
        "idemgate_requests_total{outcome=\"degraded\",route=\"lenient\"} 1",
    ] {
        assert!(metrics.contains(line), "missing `{line}`:\n{metrics}");
    }
    assert!(metrics.contains("idemgate_store_errors_total{backend=\"postgres\",op=\"reserve\"}"));

    switch.restore();
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin.get("/readyz").await.status != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready again:\n{}",
            gateway.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The refused reservation can have reached the database before the
    // relay dropped its session (the cut is seen by the relay's tasks a
    // moment later): the store frees such a record by its claim once the
    // database answers again (its retries pause up to 2 s), well before
    // its 10 s lease ends; meanwhile it is in flight (409).
    let freed_by = Instant::now() + Duration::from_secs(6);
    let fresh = loop {
        let reply = client.post("/v1/charges", Some("s-1"), "{}").await;
        if reply.status != 409 || Instant::now() > freed_by {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
    let replay = client.post("/v1/charges", Some("s-1"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.executions("s-1"), 1);
}

/// The records `key` has in `schema`, read without the relay: (in flight,
/// completed).
async fn records_of(schema: &TestSchema, key: &str) -> (i64, i64) {
    let (client, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1)
             FROM idemgate_records WHERE key = $1",
            &[&key],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    (row.get(0), row.get(1))
}

/// Sends `key` until it is answered other than 409 (at most `within`).
async fn until_not_in_flight(
    client: &common::Client,
    path: &str,
    key: &str,
    within: Duration,
) -> common::Reply {
    let deadline = Instant::now() + within;
    loop {
        let reply = client.post(path, Some(key), "{}").await;
        if reply.status != 409 || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// docs/postgres.md#a-lost-answer: the database commits a reservation and
/// the connection breaks before its answer arrives (a failover, a network
/// cut), then stays unreachable a while. The request gets the store-error
/// answer of its route; once the database is back, the key is free again
/// (the gateway deletes the record it may have made, by its claim), not
/// refused as in flight for the whole lease (60 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_reply_is_lost_frees_its_key_once_the_store_is_back() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("store-down-lost-reply");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config_leasing(&url, "60s"));
    let client = gateway.client();
    let admin = gateway.admin_client();
    assert_eq!(
        client.post("/v1/charges", Some("warm"), "{}").await.status,
        201
    );
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_unanswered_reservations_total{result=\"freed\"} 0"),
        "{metrics}"
    );

    for (path, key, first) in [
        ("/v1/charges", "lost-strict", 503),
        ("/v1/events", "lost-lenient", 201),
    ] {
        switch.lose_reply_to(key, true);
        let answered = client.post(path, Some(key), "{}").await;
        assert_eq!(answered.status, first, "{key}: {}", answered.text());
        if first == 503 {
            assert_eq!(answered.json()["code"], "store-unavailable");
            assert_eq!(
                upstream.executions(key),
                0,
                "fail closed: nothing forwarded"
            );
        } else {
            assert_eq!(answered.header("idempotency-degraded"), Some("true"));
            assert_eq!(upstream.executions(key), 1);
        }
        assert_eq!(switch.replies_lost(), if first == 503 { 1 } else { 2 });
        assert_eq!(
            records_of(&schema, key).await,
            (1, 0),
            "{key}: the lost reservation committed"
        );

        switch.restore();
        let retried = until_not_in_flight(&client, path, key, Duration::from_secs(10)).await;
        assert_eq!(
            retried.status,
            201,
            "{key}: a retry once the store is back runs, within seconds, not after the 60 s lease: {}\n{}",
            retried.text(),
            gateway.log_text()
        );
        assert_eq!(retried.header("idempotent-replayed"), Some("false"));
        let executed = if first == 503 { 1 } else { 2 };
        assert_eq!(upstream.executions(key), executed, "{key}");
        let replay = client.post(path, Some(key), "{}").await;
        assert_eq!(replay.header("idempotent-replayed"), Some("true"), "{key}");
        assert_eq!(upstream.executions(key), executed, "{key}");
        assert_eq!(records_of(&schema, key).await, (0, 1), "{key}");
    }
    // Logged by the task that freed it, after the key was free again.
    assert!(
        gateway
            .logged_line("freed a key whose reservation", Duration::from_secs(10))
            .await
            .is_some(),
        "{}",
        gateway.log_text()
    );
    let log = gateway.log_text();
    assert!(!log.contains("lost-strict"), "raw keys are never logged");
    let metrics = admin.get("/metrics").await.text();
    for line in [
        "idemgate_unanswered_reservations_total{result=\"freed\"} 2",
        "idemgate_unanswered_reservations_total{result=\"held\"} 0",
    ] {
        assert!(metrics.contains(line), "missing `{line}`:\n{metrics}");
    }
}

/// A reservation whose answer is lost with its connection runs again on
/// another one, and recognises its own record (by its claim) when the lost
/// run committed: the request runs once, at once, rather than being refused
/// as in flight by its own reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_reply_is_lost_runs_once_on_another_connection() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("store-down-lost-once");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config_leasing(&url, "60s"));
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("warm"), "{}").await.status,
        201
    );

    switch.lose_reply_to("lost-once", false);
    let first = client.post("/v1/charges", Some("lost-once"), "{}").await;
    assert_eq!(switch.replies_lost(), 1);
    assert_eq!(
        first.status,
        201,
        "{}\n{}",
        first.text(),
        gateway.log_text()
    );
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    assert!(first.header("idempotency-degraded").is_none());
    let replay = client.post("/v1/charges", Some("lost-once"), "{}").await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.executions("lost-once"), 1);
    assert_eq!(records_of(&schema, "lost-once").await, (0, 1));
}

/// A reservation the database commits but whose answer comes too late (the
/// store's deadline, connect + statement timeout + 1 s, passes first): the
/// request gets `503`, and the record is deleted by its claim, so a retry
/// runs once the answers come in time again, not after the 60 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_answered_too_late_frees_its_key() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("store-down-late-reply");
    let upstream = MockUpstream::start().await;
    let config = Config::new()
        .store(
            Store::postgres(&url)
                .set("pool_size", 4)
                .set("connect_timeout", "1s")
                .set("statement_timeout", "1s"),
        )
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "60s")
        .route(Route::api("strict", "/v1/charges").set("on_store_error", "reject"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("warm"), "{}").await.status,
        201
    );

    switch.delay_replies(Duration::from_secs(4));
    let late = client.post("/v1/charges", Some("late-1"), "{}").await;
    assert_eq!(late.status, 503, "{}", late.text());
    assert_eq!(upstream.executions("late-1"), 0);
    switch.delay_replies(Duration::ZERO);
    // Replies already held back still arrive late: let them drain.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let retried =
        until_not_in_flight(&client, "/v1/charges", "late-1", Duration::from_secs(10)).await;
    assert_eq!(
        retried.status,
        201,
        "not refused as in flight for the lease: {}\n{}",
        retried.text(),
        gateway.log_text()
    );
    assert_eq!(upstream.executions("late-1"), 1);
    assert_eq!(records_of(&schema, "late-1").await, (0, 1));
}

/// docs/operating.md#logs: raw keys never appear in logs, at any log level. tokio-postgres
/// prints each statement's parameters at debug level (the key, and a
/// completion's body): `keys show`/`purge` and a completion retried across an
/// outage run such statements with the raw key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_never_carry_the_raw_key() {
    const KEY: &str = "raw-key-7f3a9c";
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("store-down-trace");
    let upstream = MockUpstream::start().await;
    let config = config(&url).admin_token_env("IDEMGATE_TEST_ADMIN_TOKEN");
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &config,
        &[("RUST_LOG", "trace"), ("IDEMGATE_TEST_ADMIN_TOKEN", "t0k")],
    );
    let client = gateway.client();
    let admin = gateway.admin_client();
    let auth = [("authorization", "Bearer t0k")];

    // A completion that has to wait out a short cut (retried statement by statement).
    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=400", Some(KEY), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    switch.cut();
    tokio::time::sleep(Duration::from_millis(600)).await;
    switch.restore();
    let first = slow.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(upstream.executions(KEY), 1);

    let shown = admin
        .send("GET", &format!("/admin/keys/strict/{KEY}"), &auth, "")
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    let purged = admin
        .send("DELETE", &format!("/admin/keys/strict/{KEY}"), &auth, "")
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());

    let log = gateway.log_text();
    assert!(log.contains("TRACE"), "not at trace level:\n{log}");
    assert!(
        !log.contains(KEY),
        "the raw key is in the log:\n{}",
        log.lines()
            .filter(|line| line.contains(KEY))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A key released while the database is unreachable (its request answered
/// with a `release_statuses` status, so nothing is kept) is released again
/// once the database is back, not held in flight for the rest of its lease:
/// the client's retry runs at once instead of getting 409 for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_failed_in_an_outage_is_retried_once_the_store_is_back() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("release-in-outage");
    let upstream = MockUpstream::start().await;
    // `config` with a lease long enough to tell a retried release from an
    // expired lease, and a fingerprint the upstream's query does not enter.
    let config = config(&url)
        .defaults("lock_timeout", "30s")
        .with_route("strict", |r| {
            r.set("fingerprint", ["method", "path", "body"])
        });
    let text = config.toml();
    assert!(text.contains("\"30s\"") && text.contains("fingerprint"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();

    // The upstream answers 503 (released, not stored) after 1.5 s; the
    // database goes away while it waits, so the release cannot be written.
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?status=503&delay_ms=1500", Some("r-1"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    switch.cut();
    let first = first.await.unwrap();
    assert_eq!(first.status, 503, "{}", first.text());
    assert_eq!(upstream.executions("r-1"), 1);

    switch.restore();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let retry = client.post("/v1/charges", Some("r-1"), "{}").await;
        if retry.status == 201 {
            assert_eq!(retry.header("idempotent-replayed"), Some("false"));
            break;
        }
        // Until the database answers and the release is retried: 503 (store
        // unavailable) or 409 (still in flight).
        assert!(
            [409, 503].contains(&retry.status.as_u16()),
            "{} {}",
            retry.status,
            retry.text()
        );
        assert!(
            Instant::now() < deadline,
            "still not released 10 s after the database came back (lease: 30 s):\n{}",
            gateway.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        upstream.executions("r-1"),
        2,
        "the retry ran: the first answer was not kept"
    );
    // Logged by the task that released it, after the key was free again.
    assert!(
        gateway
            .logged_line(
                "released the key once the store answered again",
                Duration::from_secs(10)
            )
            .await
            .is_some(),
        "{}",
        gateway.log_text()
    );
}

/// A completion that fails while the database is unreachable is retried
/// until its lease ends (every 50 ms at first, then every 500 ms); the
/// warning about it is logged at once and then at most once per interval,
/// saying that repeats are left out, not once per retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_retried_in_an_outage_is_logged_a_bounded_number_of_times() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("complete-in-outage");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config_leasing(&url, "4s"));
    let client = gateway.client();

    // The upstream answers after 1 s; the database goes away meanwhile, so
    // the completion fails and is retried for the rest of the 4 s lease.
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=1000", Some("c-1"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    switch.cut();
    let first = first.await.unwrap();
    assert_eq!(upstream.executions("c-1"), 1);
    assert_eq!(first.status, 201, "{}", first.text());
    let log = gateway.log_text();
    let said: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("completing failed"))
        .collect();
    assert_eq!(said.len(), 1, "{}", said.join("\n"));
    assert!(
        said[0].contains("repeats in the next 10 s are not logged"),
        "{}",
        said[0]
    );
    switch.restore();
}

/// An outcome-unknown answer promises that retries get it; when the store
/// is gone by then and it cannot be recorded, it says that a retry is not
/// bound to it instead (the key is held until its lease ends, then runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_unknown_that_cannot_be_recorded_says_so() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("unrecorded-outcome");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&url));
    let client = gateway.client();

    // Recorded: the promise holds.
    let recorded = client
        .post("/v1/charges?delay_ms=3000", Some("u-1"), "{}")
        .await;
    assert_eq!(recorded.status, 504, "{}", recorded.text());
    assert!(
        recorded.text().contains("Retries get this answer"),
        "{}",
        recorded.text()
    );

    // The upstream times out at 2 s; the database goes away before that.
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=3000", Some("u-2"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    switch.cut();
    let first = first.await.unwrap();
    assert_eq!(first.status, 504, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let problem = first.json();
    assert_eq!(problem["code"], "outcome-unknown");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("could not be recorded"), "{detail}");
    assert!(!detail.contains("Retries get this answer"), "{detail}");
    switch.restore();
}

/// A server that takes no writes (a failover's former primary, still
/// reached at its address, comes back as a standby): every reservation is
/// refused, so `/readyz` says not ready though the server answers; and once
/// the address leads to a writable server again, the pool's read-only
/// connections are not kept: keyed requests run again, without a restart.
/// Simulated with the sessions of the gateway's own role starting read-only
/// (`default_transaction_read_only`), then writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_takes_no_writes_is_not_ready_and_its_connections_are_made_again() {
    let schema = TestSchema::create().await;
    let role = pg_support::TestRole::create().await;
    let dir = TestDir::new("store-read-only");
    let upstream = MockUpstream::start().await;
    let mut gateway =
        GatewayProcess::start(&dir, &upstream.url(), &config(&role.url(&schema.url())));
    let client = gateway.client();
    let admin = gateway.admin_client();
    assert_eq!(
        client.post("/v1/charges", Some("w-1"), "{}").await.status,
        201
    );
    assert_eq!(admin.get("/readyz").await.status, 200);

    pg_support::admin_sql(&format!(
        "ALTER ROLE {} SET default_transaction_read_only = on",
        role.name
    ))
    .await;
    assert!(pg_support::terminate_sessions(&schema.name).await > 0);
    let refused = client.post("/v1/charges", Some("w-2"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "store-unavailable");
    assert_eq!(upstream.executions("w-2"), 0);
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("takes no writes"), "{detail}");
    let readyz = admin.get("/readyz").await;
    assert_eq!(readyz.status, 503, "{}", readyz.text());
    assert!(
        readyz.text().contains("takes no writes"),
        "{}",
        readyz.text()
    );
    // A command that writes says why it cannot, in one line.
    for command in [&["keys", "purge"][..], &["sweep"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(command)
            .arg("-c")
            .arg(gateway.config_path())
            .args(if command[0] == "keys" {
                &["charges", "w-1"][..]
            } else {
                &[]
            })
            .output()
            .expect("run idemgate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
        assert!(
            stderr.contains("the server takes no writes"),
            "{command:?}: {stderr}"
        );
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{command:?}: {stderr}"
        );
    }
    // A gateway that starts now (its schema up to date) starts, not ready.
    gateway.restart();
    let (client, admin) = (gateway.client(), gateway.admin_client());
    let readyz = admin.get("/readyz").await;
    assert_eq!(readyz.status, 503, "{}", readyz.text());
    let refused = client.post("/v1/charges", Some("w-2"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());

    pg_support::admin_sql(&format!(
        "ALTER ROLE {} RESET default_transaction_read_only",
        role.name
    ))
    .await;
    let started = Instant::now();
    loop {
        let reply = client.post("/v1/charges", Some("w-2"), "{}").await;
        if reply.status == 201 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still {} after the server took writes again: {}",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(upstream.executions("w-2"), 1);
    assert_eq!(admin.get("/readyz").await.status, 200);
}

/// Keyed requests from `clients` tasks, one after another each, for
/// `lasting`: how many got each status.
async fn load(
    gateway: &GatewayProcess,
    prefix: &str,
    clients: usize,
    lasting: Duration,
) -> std::collections::BTreeMap<u16, u32> {
    let mut tasks = Vec::new();
    for task in 0..clients {
        let (client, prefix) = (gateway.client(), prefix.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut statuses = std::collections::BTreeMap::new();
            let started = Instant::now();
            let mut n = 0;
            while started.elapsed() < lasting {
                let key = format!("{prefix}-{task}-{n}");
                let reply = client.post("/v1/charges", Some(&key), "{}").await;
                *statuses.entry(reply.status.as_u16()).or_insert(0) += 1;
                n += 1;
            }
            statuses
        }));
    }
    let mut statuses = std::collections::BTreeMap::new();
    for task in tasks {
        for (status, n) in task.await.unwrap() {
            *statuses.entry(status).or_insert(0) += n;
        }
    }
    statuses
}

/// A server with no room for another connection (SQLSTATE 53300: its
/// `max_connections` reached, or the role's `CONNECTION LIMIT`, as here)
/// while load asks the pool to grow: the requests share the connections
/// the pool has instead of failing, and the server is not asked for a new
/// one on every request. With no connection at all, requests get 503 at
/// once, saying why, and the server still gets only a few attempts a
/// second; once it has room again, requests run without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_room_for_more_connections_is_not_asked_on_every_request() {
    let schema = TestSchema::create().await;
    let name = schema.name.clone();
    let role =
        pg_support::TestRole::limited(|role| format!("GRANT ALL ON SCHEMA {name} TO {role}")).await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&role.url(&schema.url()), switch.addr);
    let dir = TestDir::new("store-no-room");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config_pooled(&url, "10s", 8));
    let admin = gateway.admin_client();
    assert_eq!(
        gateway
            .client()
            .post("/v1/charges", Some("r-0"), "{}")
            .await
            .status,
        201
    );
    let held = pg_support::sessions(&schema.name).await;
    pg_support::admin_sql(&format!("ALTER ROLE {} CONNECTION LIMIT {held}", role.name)).await;

    let opened = switch.opened();
    let statuses = load(&gateway, "shared", 8, Duration::from_secs(2)).await;
    let attempts = switch.opened() - opened;
    assert_eq!(
        statuses.keys().copied().collect::<Vec<_>>(),
        [201],
        "{statuses:?}"
    );
    assert!(attempts <= 12, "{attempts} connections tried in 2 s");

    // No connection left, and none to be had.
    pg_support::admin_sql(&format!("ALTER ROLE {} CONNECTION LIMIT 0", role.name)).await;
    pg_support::terminate_sessions(&schema.name).await;
    let opened = switch.opened();
    let statuses = load(&gateway, "none", 8, Duration::from_secs(2)).await;
    let attempts = switch.opened() - opened;
    assert_eq!(
        statuses.keys().copied().collect::<Vec<_>>(),
        [503],
        "{statuses:?}"
    );
    assert!(attempts <= 20, "{attempts} connections tried in 2 s");
    let refused = gateway
        .client()
        .post("/v1/charges", Some("r-1"), "{}")
        .await;
    assert_eq!(refused.status, 503);
    assert_eq!(upstream.executions("r-1"), 0);
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("no room for another connection"),
        "{detail}"
    );
    let readyz = admin.get("/readyz").await;
    assert_eq!(readyz.status, 503, "{}", readyz.text());
    assert!(
        readyz.text().contains("no room for another connection"),
        "{}",
        readyz.text()
    );
    let log = gateway.log_text();
    assert!(log.contains("no room for another connection"), "{log}");

    pg_support::admin_sql(&format!("ALTER ROLE {} CONNECTION LIMIT -1", role.name)).await;
    let started = Instant::now();
    loop {
        let reply = gateway
            .client()
            .post("/v1/charges", Some("r-1"), "{}")
            .await;
        if reply.status == 201 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still {} after the server had room again: {}",
            reply.status,
            reply.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(upstream.executions("r-1"), 1);
}

/// A database whose disk is full: PostgreSQL refuses what needs a new page
/// (SQLSTATE 53100, `could not extend file ...: No space left on device`)
/// and goes on reading. A new key is refused (503, nothing forwarded) or
/// passes degraded, as with a store that is down; replays of answers
/// already stored are still served; `/readyz` stays 200 (the store answers);
/// and once there is room again, new keys run without a restart. Simulated
/// with a trigger refusing new records as a full disk does (the same error
/// as on a filesystem that filled up, docs/postgres.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_new_keys_and_still_replays_stored_answers() {
    let schema = TestSchema::create().await;
    let dir = TestDir::new("store-disk-full");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&schema.url()));
    let (client, admin) = (gateway.client(), gateway.admin_client());
    let stored = client.post("/v1/charges", Some("d-1"), "{}").await;
    assert_eq!(stored.status, 201);

    pg_support::admin_sql(&format!(
        "CREATE FUNCTION {0}.disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF EXISTS (SELECT 1 FROM {0}.idemgate_records r WHERE r.route = NEW.route
                        AND r.key = NEW.key AND r.scope = NEW.scope) THEN
                 RETURN NEW;
             END IF;
             RAISE EXCEPTION 'could not extend file \"base/1/2\": No space left on device'
                 USING ERRCODE = 'disk_full';
         END $$;
         CREATE TRIGGER disk_full BEFORE INSERT ON {0}.idemgate_records
             FOR EACH ROW EXECUTE FUNCTION {0}.disk_full()",
        schema.name
    ))
    .await;
    let refused = client.post("/v1/charges", Some("d-2"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "store-unavailable");
    assert_eq!(upstream.executions("d-2"), 0);
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("out of disk space"), "{detail}");
    assert!(!detail.contains("cannot be reached"), "{detail}");
    let passed = client.post("/v1/events", Some("d-3"), "{}").await;
    assert_eq!(passed.status, 201, "{}", passed.text());
    assert_eq!(passed.header("idempotency-degraded"), Some("true"));
    let replay = client.post("/v1/charges", Some("d-1"), "{}").await;
    assert_eq!(replay.status, 201, "{}", replay.text());
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, stored.body);
    assert_eq!(upstream.executions("d-1"), 1);
    assert_eq!(admin.get("/readyz").await.status, 200);
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains(r#"idemgate_store_errors_total{backend="postgres",op="reserve"} 2"#),
        "{metrics}"
    );
    assert!(
        gateway.log_text().contains("No space left on device"),
        "{}",
        gateway.log_text()
    );

    pg_support::admin_sql(&format!(
        "DROP TRIGGER disk_full ON {}.idemgate_records",
        schema.name
    ))
    .await;
    let after = client.post("/v1/charges", Some("d-2"), "{}").await;
    assert_eq!(after.status, 201, "{}", after.text());
    assert_eq!(upstream.executions("d-2"), 1);
}

/// A gateway on Postgres at `url` with a pool of `pool_size`, its one route
/// keyed and failing closed, its admin token `t0k`; one record, `before`,
/// already stored.
async fn strict_gateway(
    dir: &TestDir,
    upstream: &MockUpstream,
    url: &str,
    pool_size: u32,
) -> GatewayProcess {
    let config = Config::new()
        .store(
            Store::postgres(url)
                .set("pool_size", pool_size)
                .set("connect_timeout", "1s")
                .set("statement_timeout", "10s"),
        )
        .upstream(Upstream::api().timeout("2s"))
        .route(Route::api("strict", "/v1/charges").set("on_store_error", "reject"))
        .admin_token_env("IDEMGATE_TEST_ADMIN_TOKEN");
    let gateway = GatewayProcess::start_with_env(
        dir,
        &upstream.url(),
        &config,
        &[("IDEMGATE_TEST_ADMIN_TOKEN", "t0k")],
    );
    let before = gateway
        .client()
        .post("/v1/charges", Some("before"), "{}")
        .await;
    assert_eq!(before.status, 201, "{}", before.text());
    gateway
}

/// A session holding `schema`'s records table locked until it rolls back:
/// every statement on the table waits behind it.
async fn lock_records(schema: &str) -> tokio_postgres::Client {
    let (locker, connection) =
        tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.idemgate_records IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    locker
}

/// Every connection of the pool stays busy (one here, held by an
/// operator's read that waits behind a table lock): a keyed request that
/// waits `connect_timeout` for one gets 503 saying the pool stayed busy and
/// what to raise, not that the store cannot be reached (it answers), and
/// `/readyz` and the log say the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_connections_all_stay_busy_is_told_as_such() {
    let schema = TestSchema::create().await;
    let dir = TestDir::new("store-pool-busy");
    let upstream = MockUpstream::start().await;
    let gateway = strict_gateway(&dir, &upstream, &schema.url(), 1).await;
    let (client, admin) = (gateway.client(), gateway.admin_client());

    let locker = lock_records(&schema.name).await;
    let read = {
        let admin = admin.clone();
        tokio::spawn(async move {
            let auth = [("authorization", "Bearer t0k")];
            admin
                .send("GET", "/admin/keys/strict/before", &auth, "")
                .await
        })
    };
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{}' \
         AND wait_event_type = 'Lock'",
        schema.name
    );
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let row = locker.query_one(&waiting, &[]).await.unwrap();
        if row.get::<_, i64>(0) >= 1 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the operator's read never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let refused = client.post("/v1/charges", Some("busy"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "store-unavailable");
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.starts_with(
            "Every connection of the gateway's pool to the idempotency store stayed busy for 1 s"
        ),
        "{detail}"
    );
    assert!(!detail.contains("cannot be reached"), "{detail}");
    assert_eq!(upstream.executions("busy"), 0);
    let ready = admin.get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    let says = "every connection of the pool (store.pool_size = 1) stayed busy for 1s";
    assert!(ready.text().contains(says), "{}", ready.text());
    let logged = gateway
        .logged_line("store unavailable", Duration::from_secs(5))
        .await;
    assert!(
        logged.as_deref().is_some_and(|line| line.contains(says)),
        "{}",
        gateway.log_text()
    );

    locker.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(read.await.unwrap().status, 200);
    let ran = client.post("/v1/charges", Some("busy"), "{}").await;
    assert_eq!(ran.status, 201, "{}", ran.text());
    assert_eq!(admin.get("/readyz").await.status, 200);
}

/// A server with no room for another connection while every connection
/// the pool has stays busy (held by operators' reads that wait behind a
/// table lock): a keyed request waits `connect_timeout` for one to come
/// back, then gets 503 saying the server has no room for another
/// connection (what the operator mends: its `max_connections`, the role's
/// `CONNECTION LIMIT`, or the pools), not that the store cannot be reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_shared_connection_that_runs_out_names_the_connection_limit() {
    let schema = TestSchema::create().await;
    let name = schema.name.clone();
    let role =
        pg_support::TestRole::limited(|role| format!("GRANT ALL ON SCHEMA {name} TO {role}")).await;
    let dir = TestDir::new("store-no-room-shared");
    let upstream = MockUpstream::start().await;
    let gateway = strict_gateway(&dir, &upstream, &role.url(&schema.url()), 4).await;
    let (client, admin) = (gateway.client(), gateway.admin_client());
    let held = pg_support::sessions(&schema.name).await;
    pg_support::admin_sql(&format!("ALTER ROLE {} CONNECTION LIMIT {held}", role.name)).await;

    let locker = lock_records(&schema.name).await;
    // More reads than the pool may open: those that get a connection wait
    // on the lock, the others find the server without room.
    let (refused_read, mut refusals) = tokio::sync::mpsc::unbounded_channel();
    let reads: Vec<_> = (0..6)
        .map(|_| {
            let (admin, refused_read) = (admin.clone(), refused_read.clone());
            tokio::spawn(async move {
                let auth = [("authorization", "Bearer t0k")];
                let reply = admin
                    .send("GET", "/admin/keys/strict/before", &auth, "")
                    .await;
                if reply.status != 200 {
                    let _ = refused_read.send(());
                }
                reply
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(5), refusals.recv())
        .await
        .expect("a read found no connection")
        .unwrap();

    let started = Instant::now();
    let refused = client.post("/v1/charges", Some("crowded"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for a connection to come back: {:?}",
        started.elapsed()
    );
    assert_eq!(refused.json()["code"], "store-unavailable");
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("no room for another connection"),
        "{detail}"
    );
    assert!(!detail.contains("cannot be reached"), "{detail}");
    assert_eq!(upstream.executions("crowded"), 0);

    locker.batch_execute("ROLLBACK").await.unwrap();
    for read in reads {
        read.await.unwrap();
    }
    pg_support::admin_sql(&format!("ALTER ROLE {} CONNECTION LIMIT -1", role.name)).await;
    let ran = client.post("/v1/charges", Some("crowded"), "{}").await;
    assert_eq!(ran.status, 201, "{}", ran.text());
}

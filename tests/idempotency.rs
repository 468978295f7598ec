//! Every row of docs/behaviour.md's table, against the real binary on the
//! embedded store, with a counting upstream.

mod common;

use std::time::Duration;

use common::config::{Config, Route, Store, Upstream, raw};
use common::{GatewayProcess, MockUpstream, Reply, TestDir};

/// `broken` and `down` are the URLs of the upstreams of those names.
fn config(broken: &str, down: &str) -> Config {
    let route = |name: &str, prefix: &str| Route::api(name, prefix);
    Config::new()
        .server("max_request_body", "64KiB")
        .server("max_stored_response", "256KiB")
        .upstream(Upstream::api().timeout("1s"))
        .upstream(Upstream::new("broken", broken).timeout("1s"))
        .upstream(Upstream::new("down", down).timeout("1s"))
        .defaults("lock_timeout", "3s")
        .route(route("charges", "/v1/charges").set("required", true))
        .route(route("optional", "/v1/optional"))
        .route(
            route("waiting", "/v1/wait")
                .set("on_in_flight", "wait")
                .set("wait_timeout", "5s"),
        )
        .route(
            route("hooks", "/hook")
                .set("key", raw(r#"{ json_pointer = "/id" }"#))
                .set("required", true)
                .set("scope", raw("[]")),
        )
        .route(route("canonical", "/v1/canonical").set("canonical_json", true))
        .route(route("hidden", "/v1/hidden").set("forward_key", false))
        .route(route("limited", "/v1/limited").set("max_in_flight", 1))
        .route(Route::new("broken", "broken").path_prefix("/v1/broken"))
        .route(Route::new("down", "down").path_prefix("/v1/down"))
        .route(route("tagged", "/v1/tagged").set(
            "fingerprint",
            ["method", "path", "query", "body", "header:X-Account"],
        ))
        .route(
            route("hidden-lenient", "/v1/lenient-hidden")
                .set("forward_key", false)
                .set("on_store_error", "pass"),
        )
        .route(
            route("cookies", "/v1/cookies")
                .set("scope", ["header:Cookie"])
                .set("fingerprint", ["method", "path", "body", "header:Cookie"]),
        )
        .route(
            route("hosts", "/v1/hosts")
                .set("scope", ["header:Host"])
                .set("fingerprint", ["method", "path", "body", "header:Host"]),
        )
        .route(route("rest", "/").plain())
}

struct Setup {
    dir: TestDir,
    upstream: MockUpstream,
    broken_count: std::sync::Arc<std::sync::atomic::AtomicU64>,
    gateway: GatewayProcess,
}

async fn setup(name: &str) -> Setup {
    setup_with_store(name, Store::embedded()).await
}

/// `setup` on `store`.
async fn setup_with_store(name: &str, store: Store) -> Setup {
    let dir = TestDir::new(name);
    let upstream = MockUpstream::start().await;
    let (broken, broken_count) = common::upstream::start_resetting().await;
    let down = common::gateway::free_port();
    let config = config(&format!("http://{broken}"), &format!("http://{down}")).store(store);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    Setup {
        dir,
        upstream,
        broken_count,
        gateway,
    }
}

fn assert_problem(reply: &Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(reply.json()["code"], code, "{}", reply.text());
    assert!(
        reply.header("idempotent-replayed").is_none(),
        "rejections carry no marker"
    );
}

fn assert_same_answer(first: &Reply, replay: &Reply) {
    assert_eq!(first.status, replay.status);
    assert_eq!(first.body, replay.body, "replayed body differs");
    for name in ["location", "content-type", "x-execution"] {
        assert_eq!(first.header(name), replay.header(name), "{name}");
    }
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.header("date").is_some());
}

#[tokio::test]
async fn first_request_executes_once_and_retries_replay_byte_for_byte() {
    let s = setup("replay").await;
    let client = s.gateway.client();
    let first = client
        .post("/v1/charges", Some("k-1"), r#"{"amount":100}"#)
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.header("location"), Some("/v1/charges/ch_1"));
    for _ in 0..3 {
        let again = client
            .post("/v1/charges", Some("k-1"), r#"{"amount":100}"#)
            .await;
        assert_same_answer(&first, &again);
    }
    assert_eq!(s.upstream.executions("k-1"), 1);
}

/// Answers under no key carry no marker, even when the upstream sends a field
/// of its name; answers under a key carry the gateway's, never the upstream's.
#[tokio::test]
async fn only_keyed_answers_carry_the_marker_and_it_is_the_gateways() {
    let s = setup("marker-spoof").await;
    let client = s.gateway.client();
    let keyless = client.post("/v1/optional?marker=true", None, "{}").await;
    assert_eq!(keyless.status, 201);
    assert_eq!(keyless.header("idempotent-replayed"), None, "key-less");
    let get = client
        .send(
            "GET",
            "/v1/charges?marker=true",
            &[("idempotency-key", "mk-0")],
            "",
        )
        .await;
    assert_eq!(get.status, 201);
    assert_eq!(
        get.header("idempotent-replayed"),
        None,
        "method not covered"
    );
    // A plain reverse-proxy route has no marker of its own to protect.
    let plain = client.post("/other?marker=true", None, "{}").await;
    assert_eq!(plain.header("idempotent-replayed"), Some("true"));

    let fresh = client
        .post("/v1/charges?marker=true", Some("mk-1"), "{}")
        .await;
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
    let replay = client
        .post("/v1/charges?marker=true", Some("mk-1"), "{}")
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let released = client
        .post("/v1/charges?marker=true&status=503", Some("mk-2"), "{}")
        .await;
    assert_eq!(released.header("idempotent-replayed"), Some("false"));

    // Nor are the gateway's other fields taken from the upstream, on any answer.
    let claims = |reply: &Reply, what: &str| {
        for name in ["idempotency-degraded", "idempotency-replay"] {
            assert_eq!(reply.header(name), None, "{what}: {name}");
        }
    };
    let keyless = client.post("/v1/optional?claims=1", None, "{}").await;
    claims(&keyless, "key-less");
    let fresh = client
        .post("/v1/charges?claims=1", Some("mk-3"), "{}")
        .await;
    claims(&fresh, "fresh");
    let replay = client
        .post("/v1/charges?claims=1", Some("mk-3"), "{}")
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    claims(&replay, "replay");
    let released = client
        .post("/v1/charges?claims=1&status=503", Some("mk-4"), "{}")
        .await;
    claims(&released, "released");
}

#[tokio::test]
async fn methods_outside_the_policy_pass_through_without_a_record() {
    let s = setup("methods").await;
    let client = s.gateway.client();
    for _ in 0..2 {
        let reply = client
            .send("GET", "/v1/charges", &[("idempotency-key", "g-1")], "")
            .await;
        assert_eq!(reply.status, 201);
        assert!(reply.header("idempotent-replayed").is_none());
    }
    assert_eq!(s.upstream.executions("g-1"), 2);
}

#[tokio::test]
async fn missing_key_is_400_when_required_and_forwarded_otherwise() {
    let s = setup("missing").await;
    let client = s.gateway.client();
    assert_problem(
        &client.post("/v1/charges", None, "{}").await,
        400,
        "missing-key",
    );
    assert_eq!(s.upstream.total(), 0);
    for _ in 0..2 {
        let reply = client.post("/v1/optional", None, "{}").await;
        assert_eq!(reply.status, 201);
        assert!(reply.header("idempotent-replayed").is_none());
    }
    assert_eq!(s.upstream.total(), 2);

    // Over HTTP/2 the refusal comes before the body is read; the gateway
    // answers, then reads and drops the body for a moment, so the stream is
    // not reset under the answer (bad_input.rs looks for the reset itself).
    let h2 = common::Client::h2c(s.gateway.addr);
    let body = "x".repeat(48 * 1024);
    for key in [None, Some("k1, k2")] {
        for _ in 0..5 {
            let mut headers = vec![("content-type", "application/json")];
            headers.extend(key.map(|key| ("idempotency-key", key)));
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                h2.send("POST", "/v1/charges", &headers, body.clone()),
            )
            .await
            .expect("an answer");
            assert_eq!(reply.status, 400, "{key:?}");
        }
    }
    assert_eq!(s.upstream.total(), 2);
}

#[tokio::test]
async fn invalid_keys_are_400_and_quoted_keys_equal_bare_ones() {
    let s = setup("invalid").await;
    let client = s.gateway.client();
    let long = "k".repeat(256);
    for bad in [long.as_str(), "a\tb", "\"\"", "\"unterminated", "two words"] {
        let reply = client
            .send("POST", "/v1/charges", &[("idempotency-key", bad)], "{}")
            .await;
        assert_problem(&reply, 400, "invalid-key");
    }
    assert_eq!(s.upstream.total(), 0);

    let max = "k".repeat(255);
    assert_eq!(
        client.post("/v1/charges", Some(&max), "{}").await.status,
        201
    );

    let bare = client.post("/v1/charges", Some("quoted-1"), "{}").await;
    let quoted = client.post("/v1/charges", Some("\"quoted-1\""), "{}").await;
    assert_same_answer(&bare, &quoted);
}

#[tokio::test]
async fn keyed_body_over_the_limit_is_413_and_nothing_is_forwarded() {
    let s = setup("too-large").await;
    let client = s.gateway.client();
    let big = "x".repeat(70 * 1024);
    assert_problem(
        &client.post("/v1/charges", Some("big-1"), &big).await,
        413,
        "body-too-large",
    );
    assert_eq!(s.upstream.total(), 0);
    // Without a key the body streams and is not limited.
    assert_eq!(client.post("/v1/optional", None, &big).await.status, 201);
}

#[tokio::test]
async fn reuse_with_another_payload_is_422_and_leaks_nothing() {
    let s = setup("mismatch").await;
    let client = s.gateway.client();
    let first = client
        .post("/v1/charges", Some("m-1"), r#"{"amount":100}"#)
        .await;
    assert_eq!(first.status, 201);
    for (path, body) in [
        ("/v1/charges", r#"{"amount":999}"#),
        ("/v1/charges/other", r#"{"amount":100}"#),
        ("/v1/charges?x=1", r#"{"amount":100}"#),
    ] {
        let reply = client.post(path, Some("m-1"), body).await;
        assert_problem(&reply, 422, "fingerprint-mismatch");
        assert!(
            !reply.text().contains("ch_1"),
            "a 422 must not echo the stored answer"
        );
    }
    assert_eq!(s.upstream.total(), 1);
}

#[tokio::test]
async fn in_flight_duplicate_is_409_with_retry_after_or_422_for_another_payload() {
    let s = setup("conflict").await;
    let client = s.gateway.client();
    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=600", Some("c-1"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dup = client
        .post("/v1/charges?delay_ms=600", Some("c-1"), "{}")
        .await;
    assert_problem(&dup, 409, "key-in-flight");
    let retry_after: u64 = dup.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let other = client
        .post("/v1/charges?delay_ms=600", Some("c-1"), r#"{"x":1}"#)
        .await;
    assert_problem(&other, 422, "fingerprint-mismatch");
    let first = slow.await.unwrap();
    assert_eq!(first.status, 201);
    let replay = client
        .post("/v1/charges?delay_ms=600", Some("c-1"), "{}")
        .await;
    assert_same_answer(&first, &replay);
    assert_eq!(s.upstream.executions("c-1"), 1);
}

#[tokio::test]
async fn two_hundred_concurrent_duplicates_execute_once() {
    let s = setup("storm").await;
    let client = s.gateway.client();
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .post("/v1/charges?delay_ms=300", Some("storm"), "{}")
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert_eq!(s.upstream.executions("storm"), 1);
    let fresh: Vec<_> = answers
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("false"))
        .collect();
    assert_eq!(fresh.len(), 1);
    for reply in &answers {
        match reply.status.as_u16() {
            409 => assert_eq!(reply.json()["code"], "key-in-flight"),
            201 => assert_eq!(reply.body, fresh[0].body),
            other => panic!("unexpected {other}: {}", reply.text()),
        }
    }
}

#[tokio::test]
async fn wait_mode_coalesces_concurrent_duplicates_into_one_execution() {
    let s = setup("wait").await;
    let client = s.gateway.client();
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .post("/v1/wait?delay_ms=500", Some("w-1"), "{}")
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    assert_eq!(s.upstream.executions("w-1"), 1);
    for reply in &answers {
        assert_eq!(reply.status, 201, "{}", reply.text());
        assert_eq!(reply.body, answers[0].body);
        assert_eq!(reply.header("location"), answers[0].header("location"));
    }
    let fresh = answers
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("false"))
        .count();
    assert_eq!(fresh, 1);
}

/// A first answer that frees its key stores nothing to replay: its waiters
/// are retries of a free key, run one at a time, each answered by its own run.
#[tokio::test]
async fn waiters_of_a_released_first_answer_run_in_turn() {
    let s = setup("wait-released").await;
    let client = s.gateway.client();
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .post("/v1/wait?delay_ms=300&status=503", Some("wr-1"), "{}")
                    .await
            })
        })
        .collect();
    let mut executions = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 503, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some("false"));
        executions.push(reply.header("x-execution").unwrap().to_owned());
    }
    executions.sort();
    executions.dedup();
    assert_eq!(executions.len(), 3, "each waiter got its own run");
    assert_eq!(s.upstream.executions("wr-1"), 3);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "never two runs of the key at once"
    );
}

#[tokio::test]
async fn scope_separates_tenants_with_the_same_key() {
    let s = setup("scope").await;
    let client = s.gateway.client();
    let send = |auth: &'static str| {
        let client = client.clone();
        async move {
            client
                .send(
                    "POST",
                    "/v1/charges",
                    &[("idempotency-key", "shared"), ("authorization", auth)],
                    "{}",
                )
                .await
        }
    };
    let alice = send("Bearer alice").await;
    let bob = send("Bearer bob").await;
    assert_eq!(alice.header("idempotent-replayed"), Some("false"));
    assert_eq!(bob.header("idempotent-replayed"), Some("false"));
    assert_ne!(alice.body, bob.body);
    assert_same_answer(&alice, &send("Bearer alice").await);
    assert_same_answer(&bob, &send("Bearer bob").await);
    assert_eq!(s.upstream.executions("shared"), 2);
    // The store keeps a hash of the scope, never the credential itself.
    assert!(std::fs::metadata(s.dir.path("store.db")).unwrap().len() > 0);
    for file in ["store.db", "store.db-wal"] {
        let bytes = std::fs::read(s.dir.path(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("Bearer alice") && !text.contains("Bearer bob"),
            "{file}"
        );
    }
}

#[tokio::test]
async fn a_header_sent_on_two_lines_is_one_field_for_scope_and_fingerprint() {
    let s = setup("field-lines").await;
    let client = s.gateway.client();
    let send = |path: &'static str, key: &'static str, headers: &'static [(&str, &str)]| {
        let client = client.clone();
        async move {
            let mut all = vec![("idempotency-key", key)];
            all.extend_from_slice(headers);
            client.send("POST", path, &all, "{}").await
        }
    };
    // Scope: a second Authorization line is part of the field, so it never
    // rides on the first line's tenant and gets its answer.
    let alice = send(
        "/v1/charges",
        "lines-1",
        &[("authorization", "Bearer alice")],
    )
    .await;
    assert_eq!(alice.header("idempotent-replayed"), Some("false"));
    let two = &[
        ("authorization", "Bearer alice"),
        ("authorization", "Bearer bob"),
    ];
    let both = send("/v1/charges", "lines-1", two).await;
    assert_eq!(both.header("idempotent-replayed"), Some("false"));
    assert_ne!(both.body, alice.body);
    assert_eq!(s.upstream.executions("lines-1"), 2);
    // Two lines and one line joined with ", " are the same field.
    let joined = &[("authorization", "Bearer alice, Bearer bob")];
    assert_same_answer(&both, &send("/v1/charges", "lines-1", joined).await);

    // Fingerprint: a request that adds a second line is another request.
    let first = send("/v1/tagged", "lines-2", &[("x-account", "a")]).await;
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let more = &[("x-account", "a"), ("x-account", "b")];
    assert_problem(
        &send("/v1/tagged", "lines-2", more).await,
        422,
        "fingerprint-mismatch",
    );
    assert_same_answer(
        &first,
        &send("/v1/tagged", "lines-2", &[("x-account", "a")]).await,
    );
    assert_eq!(s.upstream.executions("lines-2"), 1);
}

/// Cookies are one field joined by "; " (RFC 9113 §8.2.3), not ", ": an HTTP/2
/// client sending a line per cookie is the same tenant and the same request
/// as an HTTP/1 client sending one line, for scope and fingerprint alike.
#[tokio::test]
async fn cookie_lines_are_one_cookie_string_for_scope_and_fingerprint() {
    let s = setup("cookie-lines").await;
    let h1 = s.gateway.client();
    let h2 = common::Client::h2c(s.gateway.addr);
    let one_line = [("idempotency-key", "ck-1"), ("cookie", "sid=a; lang=fr")];
    let first = h1.send("POST", "/v1/cookies", &one_line, "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let split = [
        ("idempotency-key", "ck-1"),
        ("cookie", "sid=a"),
        ("cookie", "lang=fr"),
    ];
    for client in [&h2, &h1] {
        let again = client.send("POST", "/v1/cookies", &split, "{}").await;
        assert_same_answer(&first, &again);
    }
    // Another cookie string is another tenant.
    let other = [("idempotency-key", "ck-1"), ("cookie", "sid=b; lang=fr")];
    let bob = h2.send("POST", "/v1/cookies", &other, "{}").await;
    assert_eq!(bob.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.executions("ck-1"), 2);
}

/// `header:Host` reads the request's host as the upstream gets it: over
/// HTTP/2 that is the `:authority`, and no `Host` field comes with it.
#[tokio::test]
async fn host_is_one_tenant_over_http1_and_http2() {
    let s = setup("host-scope").await;
    let h1 = s.gateway.client();
    let h2 = common::Client::h2c(s.gateway.addr);
    let first = h1.post("/v1/hosts", Some("hs-1"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_same_answer(&first, &h2.post("/v1/hosts", Some("hs-1"), "{}").await);
    assert_eq!(s.upstream.executions("hs-1"), 1);

    let second = h2.post("/v1/hosts", Some("hs-2"), "{}").await;
    assert_same_answer(&second, &h1.post("/v1/hosts", Some("hs-2"), "{}").await);
    // Another host is another tenant.
    let other = h1
        .send(
            "POST",
            "/v1/hosts",
            &[("idempotency-key", "hs-2"), ("host", "other.example")],
            "{}",
        )
        .await;
    assert_eq!(other.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.executions("hs-2"), 2);
}

#[tokio::test]
async fn canonical_json_compares_bodies_by_value_only_where_enabled() {
    let s = setup("canonical").await;
    let client = s.gateway.client();
    let first = client
        .post("/v1/canonical", Some("j-1"), r#"{"a":1,"b":[1,2]}"#)
        .await;
    let same_value = client
        .post("/v1/canonical", Some("j-1"), r#"{ "b": [1, 2], "a": 1 }"#)
        .await;
    assert_same_answer(&first, &same_value);

    assert_eq!(
        client
            .post("/v1/charges", Some("j-2"), r#"{"a":1,"b":2}"#)
            .await
            .status,
        201
    );
    let reordered = client
        .post("/v1/charges", Some("j-2"), r#"{"b":2,"a":1}"#)
        .await;
    assert_problem(&reordered, 422, "fingerprint-mismatch");
}

#[tokio::test]
async fn json_pointer_key_from_the_body() {
    let s = setup("pointer").await;
    let client = s.gateway.client();
    let event = r#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let first = client.post("/hook", None, event).await;
    assert_eq!(first.status, 201);
    let redelivery = client.post("/hook", None, event).await;
    assert_same_answer(&first, &redelivery);
    assert_eq!(s.upstream.total(), 1);

    assert_problem(
        &client.post("/hook", None, "not json").await,
        400,
        "missing-key",
    );
    assert_problem(
        &client.post("/hook", None, r#"{"type":"x"}"#).await,
        400,
        "missing-key",
    );
    assert_problem(
        &client.post("/hook", None, r#"{"id":{"nested":1}}"#).await,
        400,
        "missing-key",
    );
    assert_eq!(s.upstream.total(), 1);
}

#[tokio::test]
async fn release_statuses_are_returned_not_stored() {
    let s = setup("release").await;
    let client = s.gateway.client();
    let busy = client
        .post("/v1/charges?status=503", Some("r-1"), "{}")
        .await;
    assert_eq!(busy.status, 503);
    assert_eq!(busy.header("idempotent-replayed"), Some("false"));
    let again = client
        .post("/v1/charges?status=503", Some("r-1"), "{}")
        .await;
    assert_eq!(again.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.executions("r-1"), 2, "a released key runs again");
}

#[tokio::test]
async fn refused_upstream_is_502_and_frees_the_key() {
    let s = setup("refused").await;
    let client = s.gateway.client();
    for _ in 0..2 {
        let reply = client.post("/v1/down", Some("d-1"), "{}").await;
        assert_problem(&reply, 502, "upstream-unreachable");
    }
}

#[tokio::test]
async fn timeout_after_sending_is_a_stored_504_outcome_unknown() {
    let s = setup("timeout").await;
    let client = s.gateway.client();
    let first = client
        .post("/v1/charges?delay_ms=1500", Some("t-1"), "{}")
        .await;
    assert_eq!(first.status, 504);
    assert_eq!(first.json()["code"], "outcome-unknown");
    assert_eq!(first.json()["type"], "outcome-unknown");
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let retry = client
        .post("/v1/charges?delay_ms=1500", Some("t-1"), "{}")
        .await;
    assert_eq!(retry.status, 504);
    assert_eq!(retry.body, first.body);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        s.upstream.executions("t-1"),
        1,
        "an unknown outcome is not run again"
    );
}

#[tokio::test]
async fn broken_connection_after_sending_is_a_stored_502_outcome_unknown() {
    let s = setup("broken").await;
    let client = s.gateway.client();
    let first = client.post("/v1/broken", Some("b-1"), "{}").await;
    assert_eq!(first.status, 502, "{}", first.text());
    assert_eq!(first.json()["code"], "outcome-unknown");
    let retry = client.post("/v1/broken", Some("b-1"), "{}").await;
    assert_eq!(retry.status, 502);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(s.broken_count.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn large_answers_stream_and_replay_status_and_headers_only() {
    let s = setup("oversized").await;
    let client = s.gateway.client();
    let first = client
        .post("/v1/charges?pad=300000", Some("big-answer"), "{}")
        .await;
    assert_eq!(first.status, 201);
    assert!(first.body.len() > 300_000);
    // Streamed past the store's limit, it still says its length.
    let length = first.body.len().to_string();
    assert_eq!(first.header("content-length"), Some(length.as_str()));
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let replay = client
        .post("/v1/charges?pad=300000", Some("big-answer"), "{}")
        .await;
    assert_eq!(replay.status, 201);
    assert!(replay.body.is_empty());
    assert_eq!(replay.header("idempotency-replay"), Some("omitted"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("location"), first.header("location"));
    assert_eq!(s.upstream.executions("big-answer"), 1);
}

#[tokio::test]
async fn forward_key_and_excluded_headers() {
    let s = setup("headers").await;
    let client = s.gateway.client();
    client.post("/v1/hidden", Some("h-1"), "{}").await;
    assert_eq!(
        s.upstream.last_header("idempotency-key"),
        None,
        "forward_key = false"
    );
    client.post("/v1/charges", Some("h-2"), "{}").await;
    assert_eq!(
        s.upstream.last_header("idempotency-key").as_deref(),
        Some("h-2")
    );

    let fresh = client.post("/v1/charges?cookie=1", Some("h-3"), "{}").await;
    assert!(
        fresh.header("set-cookie").is_some(),
        "the fresh answer keeps Set-Cookie"
    );
    let replay = client.post("/v1/charges?cookie=1", Some("h-3"), "{}").await;
    assert!(
        replay.header("set-cookie").is_none(),
        "Set-Cookie is never replayed"
    );
}

/// A header added to `replay_exclude_headers` by a reload is not replayed
/// from answers stored before it either: "never stored nor replayed".
#[tokio::test]
async fn headers_excluded_by_a_reload_leave_older_replays_too() {
    let s = setup("exclude-reload").await;
    let client = s.gateway.client();
    let first = client.post("/v1/charges", Some("xr-1"), "{}").await;
    assert!(first.header("x-execution").is_some());

    let config = std::fs::read_to_string(s.gateway.config_path()).unwrap();
    let route = "match = { path_prefix = \"/v1/charges\" }\n";
    assert!(config.contains(route));
    let excluding = config.replacen(
        route,
        &format!("{route}replay_exclude_headers = [\"set-cookie\", \"X-Execution\"]\n"),
        1,
    );
    std::fs::write(s.gateway.config_path(), excluding).unwrap();
    s.gateway.signal("HUP");
    let admin = s.gateway.admin_client();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !admin
        .get("/metrics")
        .await
        .text()
        .contains("idemgate_config_reloads_total{result=\"ok\"} 1")
    {
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let replay = client.post("/v1/charges", Some("xr-1"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("location"), first.header("location"));
    assert_eq!(replay.header("x-execution"), None, "excluded since");
}

#[tokio::test]
async fn client_gone_mid_request_still_records_the_answer() {
    let s = setup("disconnect").await;
    let client = s.gateway.client();
    let abandoned = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=600", Some("gone-1"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    abandoned.abort();
    // A fresh connection, after the upstream has answered.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let retry = common::Client::new(s.gateway.addr)
        .post("/v1/charges?delay_ms=600", Some("gone-1"), "{}")
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(s.upstream.executions("gone-1"), 1);
}

/// The counting rule of docs/operating.md ("How the metrics add up"): a
/// client that half-closes is still answered and counted once; one whose
/// connection is reset before its answer is ready is not counted, while
/// its execution is: in the upstream histogram, in `idemgate_inflight`
/// until recorded, and its retry replays.
#[tokio::test]
async fn a_client_that_leaves_is_counted_once_or_not_at_all() {
    use tokio::io::AsyncWriteExt;
    let s = setup("leave-counts").await;
    let value = |text: &str, series: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0, |v| v.trim().parse().expect("a number"))
    };
    // The metrics once `series` reads `wanted` (within 5 s).
    let until = |series: &'static str, wanted: u64| {
        let admin = s.gateway.admin_client();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                let text = admin.get("/metrics").await.text();
                if value(&text, series) == wanted || tokio::time::Instant::now() > deadline {
                    return text;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let request = |key: &str| {
        format!(
            "POST /v1/charges?delay_ms=600 HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: {key}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        )
    };
    let new = "idemgate_requests_total{outcome=\"new\",route=\"charges\"}";
    let durations = "idemgate_request_duration_seconds_count{outcome=\"new\",route=\"charges\"}";
    let upstream = "idemgate_upstream_duration_seconds_count{route=\"charges\",upstream=\"api\"}";
    let inflight = "idemgate_inflight{route=\"charges\"}";

    // Reset while the upstream runs.
    let mut reset = tokio::net::TcpStream::connect(s.gateway.addr)
        .await
        .expect("connect");
    reset
        .write_all(request("reset-1").as_bytes())
        .await
        .expect("write");
    assert_eq!(value(&until(inflight, 1).await, inflight), 1);
    reset.set_zero_linger().expect("linger");
    drop(reset);
    let text = until(upstream, 1).await;
    let text = if value(&text, inflight) == 0 {
        text
    } else {
        until(inflight, 0).await
    };
    assert_eq!(value(&text, inflight), 0, "{text}");
    assert_eq!(value(&text, new), 0, "a request nobody was answered");
    assert_eq!(value(&text, durations), 0);
    assert_eq!(value(&text, upstream), 1, "its execution ran");
    assert_eq!(s.upstream.executions("reset-1"), 1);
    let retry = s
        .gateway
        .client()
        .post("/v1/charges?delay_ms=600", Some("reset-1"), "{}")
        .await;
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    // Not counted, but the request that ran has its log line, said to
    // have lost its client; the others' lines say nothing of it. Written
    // once its answer is recorded, which the replay may read first.
    s.gateway
        .logged_line("client_left", Duration::from_secs(10))
        .await;
    let log = s.gateway.log_text();
    let left: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("client_left"))
        .collect();
    assert_eq!(left.len(), 1, "{log}");
    for field in [
        "client_left=true",
        "status=201",
        "outcome=\"new\"",
        "route=\"charges\"",
        // The client that left, as its connection came.
        " client=127.0.0.1:",
    ] {
        assert!(left[0].contains(field), "{field}: {}", left[0]);
    }

    // Half-closed: answered (the write may fail) and counted once.
    let mut half = tokio::net::TcpStream::connect(s.gateway.addr)
        .await
        .expect("connect");
    half.write_all(request("half-1").as_bytes())
        .await
        .expect("write");
    half.shutdown().await.expect("half-close");
    let text = until(new, 1).await;
    assert_eq!(value(&text, new), 1, "{text}");
    assert_eq!(value(&text, durations), 1);
    assert_eq!(value(&text, upstream), 2);
    assert_eq!(value(&text, inflight), 0);
    assert_eq!(
        value(
            &text,
            "idemgate_requests_total{outcome=\"replayed\",route=\"charges\"}"
        ),
        1
    );
}

/// Keyed executions whose clients all left are counted once they end, in
/// `idemgate_executions_total`, though no answer of theirs is counted in
/// `idemgate_requests_total`: while they run, `idemgate_inflight` is above 0
/// with no completed outcome, which alone does not say they are stuck.
#[tokio::test]
async fn executions_whose_clients_left_are_counted_when_they_end() {
    use tokio::io::AsyncWriteExt;
    let s = setup("leave-executions").await;
    let admin = s.gateway.admin_client();
    let value = |text: &str, series: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0, |v| v.trim().parse().expect("a number"))
    };
    let executions = "idemgate_executions_total{route=\"charges\"}";
    let inflight = "idemgate_inflight{route=\"charges\"}";
    let completed = [
        "new",
        "released",
        "upstream_error",
        "outcome_unknown",
        "degraded",
    ]
    .map(|outcome| format!("idemgate_requests_total{{outcome=\"{outcome}\",route=\"charges\"}}"));
    let before = admin.get("/metrics").await.text();
    assert!(before.contains(&format!("{executions} 0")), "{before}");

    let mut gone = Vec::new();
    for n in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(s.gateway.addr)
            .await
            .expect("connect");
        let request = format!(
            "POST /v1/charges?delay_ms=800 HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: left-{n}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        gone.push(stream);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let running = loop {
        let text = admin.get("/metrics").await.text();
        if value(&text, inflight) == 3 || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(value(&running, inflight), 3, "{running}");
    for stream in gone {
        stream.set_zero_linger().expect("linger");
        drop(stream);
    }
    // Running, their clients gone: nothing completed is counted yet.
    for series in &completed {
        assert_eq!(value(&running, series), 0, "{series}");
    }
    assert_eq!(value(&running, executions), 0, "{running}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let ended = loop {
        let text = admin.get("/metrics").await.text();
        if value(&text, executions) == 3 || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(value(&ended, executions), 3, "{ended}");
    assert_eq!(value(&ended, inflight), 0, "{ended}");
    for series in &completed {
        assert_eq!(value(&ended, series), 0, "{series}: nobody was answered");
    }
    for n in 0..3 {
        assert_eq!(s.upstream.executions(&format!("left-{n}")), 1);
    }

    // An execution whose client stays is counted there too.
    let answered = s
        .gateway
        .client()
        .post("/v1/charges", Some("stays-1"), "{}")
        .await;
    assert_eq!(answered.status, 201, "{}", answered.text());
    let text = admin.get("/metrics").await.text();
    assert_eq!(value(&text, executions), 4, "{text}");
    assert_eq!(value(&text, &completed[0]), 1, "{text}");
}

#[tokio::test]
async fn answers_survive_sigkill_and_a_lease_of_a_dead_gateway_is_taken_over() {
    let mut s = setup("crash").await;
    let client = s.gateway.client();
    let done = client.post("/v1/charges", Some("done-1"), "{}").await;
    assert_eq!(done.status, 201);

    let doomed = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=900", Some("doomed"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.gateway.kill();
    let _ = doomed.await;
    s.gateway.restart();
    let client = s.gateway.client();

    // Answered before the kill: replayed after it.
    assert_same_answer(
        &done,
        &client.post("/v1/charges", Some("done-1"), "{}").await,
    );

    // In flight at the kill: its lease (3s) is still live, then taken over once.
    let early = client
        .post("/v1/charges?delay_ms=900", Some("doomed"), "{}")
        .await;
    assert_problem(&early, 409, "key-in-flight");
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let rerun = client
        .post("/v1/charges?delay_ms=900", Some("doomed"), "{}")
        .await;
    assert_eq!(rerun.status, 201, "{}", rerun.text());
    assert_eq!(rerun.header("idempotent-replayed"), Some("false"));
    let replay = client
        .post("/v1/charges?delay_ms=900", Some("doomed"), "{}")
        .await;
    assert_same_answer(&rerun, &replay);
    assert_eq!(s.upstream.executions("doomed"), 2);
}

/// A gateway killed mid-request may have let the request run: once its
/// lease is over the key is taken over by the same request only. Another
/// request under the key is 422 as while the lease was live, and reaches
/// nothing, until the record is purged (or swept: not within this test).
#[tokio::test]
async fn after_a_sigkill_only_the_same_request_takes_the_key_over() {
    let mut s = setup("crash-other-body").await;
    let client = s.gateway.client();
    let (first, second) = (r#"{"amount":1}"#, r#"{"amount":2}"#);
    let doomed: Vec<_> = ["doomed-rerun", "doomed-purged"]
        .into_iter()
        .map(|key| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .post("/v1/charges?delay_ms=900", Some(key), first)
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.gateway.kill();
    for request in doomed {
        let _ = request.await;
    }
    s.gateway.restart();
    let client = s.gateway.client();
    tokio::time::sleep(Duration::from_millis(3200)).await;

    for key in ["doomed-rerun", "doomed-purged"] {
        assert_eq!(s.upstream.executions(key), 1, "{key}");
        let other = client
            .post("/v1/charges?delay_ms=900", Some(key), second)
            .await;
        assert_problem(&other, 422, "fingerprint-mismatch");
        assert_eq!(s.upstream.executions(key), 1, "{key}: nothing forwarded");
    }

    let rerun = client
        .post("/v1/charges?delay_ms=900", Some("doomed-rerun"), first)
        .await;
    assert_eq!(rerun.status, 201, "{}", rerun.text());
    assert_eq!(rerun.header("idempotent-replayed"), Some("false"));
    let other = client
        .post("/v1/charges?delay_ms=900", Some("doomed-rerun"), second)
        .await;
    assert_problem(&other, 422, "fingerprint-mismatch");
    assert_eq!(s.upstream.executions("doomed-rerun"), 2);

    // Purged (beside the running gateway), the key is free to any request.
    let config = s.gateway.config_path().to_str().unwrap().to_owned();
    let purged = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["keys", "purge", "-c", &config, "charges", "doomed-purged"])
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&purged.stdout),
        "1 record deleted\n",
        "{}",
        String::from_utf8_lossy(&purged.stderr)
    );
    let fresh = client
        .post("/v1/charges", Some("doomed-purged"), second)
        .await;
    assert_eq!(fresh.status, 201, "{}", fresh.text());
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.executions("doomed-purged"), 2);
}

#[tokio::test]
async fn with_process_crash_durability_answers_committed_just_before_a_sigkill_replay() {
    let mut s = setup_with_store(
        "crash-unsynced",
        Store::embedded().set("durability", "process_crash"),
    )
    .await;
    let client = s.gateway.client();
    // Answered at their commit; the kill follows at once, before most of
    // them can have been synced to the disk.
    let answers = futures_util::future::join_all((0..40).map(|n| {
        let client = client.clone();
        async move {
            client
                .post("/v1/charges", Some(&format!("unsynced-{n}")), "{}")
                .await
        }
    }))
    .await;
    s.gateway.kill();
    s.gateway.restart();
    let client = s.gateway.client();
    for (n, answer) in answers.iter().enumerate() {
        assert_eq!(answer.status, 201, "{}", answer.text());
        let key = format!("unsynced-{n}");
        let replay = client.post("/v1/charges", Some(&key), "{}").await;
        assert_same_answer(answer, &replay);
        assert_eq!(s.upstream.executions(&key), 1, "{key}");
    }
}

/// The store file deleted under a running gateway: SQLite would go on
/// writing to the unlinked file and the next start would find nothing. The
/// gateway fails closed within a second (503 + Retry-After, `/readyz` 503),
/// says why once, and does not log every refused request.
#[tokio::test]
async fn a_store_file_deleted_under_the_gateway_is_refused_and_logged_once() {
    let s = setup("file-deleted").await;
    let client = s.gateway.client();
    let first = client.post("/v1/charges", Some("before"), "{}").await;
    assert_eq!(first.status, 201);
    for file in ["store.db", "store.db-wal", "store.db-shm"] {
        std::fs::remove_file(s.dir.path(file)).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    for n in 0..40 {
        let refused = client
            .post("/v1/charges", Some(&format!("after-{n}")), "{}")
            .await;
        assert_problem(&refused, 503, "store-unavailable");
        assert!(refused.header("retry-after").is_some());
    }
    let ready = s.gateway.admin_client().get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(s.upstream.executions("after-0"), 0, "nothing forwarded");

    let log = s.gateway.log_text();
    let gone = log.matches("was deleted while idemgate ran").count();
    assert!(gone >= 1, "{log}");
    assert_eq!(log.matches("store file gone").count(), 1, "{log}");
    let warned = log
        .lines()
        .filter(|line| line.contains(" WARN ") && line.contains(": store unavailable"))
        .count();
    assert!(
        (1..=3).contains(&warned),
        "{warned} warnings for 40 refused requests:\n{log}"
    );
}

/// `forward_key = false` holds on every way a keyed request reaches the
/// upstream, forwarded without a record while the store is down included.
#[tokio::test]
async fn a_key_not_forwarded_stays_behind_when_the_store_is_down() {
    let s = setup("hidden-degraded").await;
    let client = s.gateway.client();
    let stored = client.post("/v1/lenient-hidden", Some("hd-1"), "{}").await;
    assert_eq!(stored.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.last_header("idempotency-key"), None);
    for file in ["store.db", "store.db-wal", "store.db-shm"] {
        std::fs::remove_file(s.dir.path(file)).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // An upstream's field of the marker's name is not passed off as ours.
    let degraded = client
        .post("/v1/lenient-hidden?marker=true", Some("hd-2"), "{}")
        .await;
    assert_eq!(degraded.status, 201, "{}", degraded.text());
    assert_eq!(degraded.header("idempotency-degraded"), Some("true"));
    assert_eq!(degraded.header("idempotent-replayed"), None, "no marker");
    let claiming = client
        .post("/v1/lenient-hidden?claims=1", Some("hd-3"), "{}")
        .await;
    assert_eq!(claiming.header("idempotency-degraded"), Some("true"));
    assert_eq!(claiming.header("idempotency-replay"), None);
    assert_eq!(
        s.upstream.last_header("idempotency-key"),
        None,
        "forward_key = false, store down"
    );
}

#[tokio::test]
async fn metrics_count_every_outcome() {
    let s = setup("metrics").await;
    let client = s.gateway.client();
    client.post("/v1/charges", Some("x-1"), "{}").await;
    client.post("/v1/charges", Some("x-1"), "{}").await;
    client
        .post("/v1/charges", Some("x-1"), r#"{"other":1}"#)
        .await;
    client.post("/v1/charges", None, "{}").await;
    client.post("/v1/charges", Some("\"\""), "{}").await;
    client.post("/v1/optional", None, "{}").await;
    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=500", Some("x-2"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    client
        .post("/v1/charges?delay_ms=500", Some("x-2"), "{}")
        .await;
    slow.await.unwrap();
    client.get("/anything").await;
    client
        .post("/v1/charges", Some("x-3"), &"x".repeat(70 * 1024))
        .await;
    client
        .post("/v1/charges?status=429", Some("x-4"), "{}")
        .await;
    client.post("/v1/down", Some("x-5"), "{}").await;
    client
        .post("/v1/charges?delay_ms=1500", Some("x-6"), "{}")
        .await;

    let text = s.gateway.admin_client().get("/metrics").await.text();
    for (route, outcome, count) in [
        ("charges", "new", 2),
        ("charges", "replayed", 1),
        ("charges", "mismatch", 1),
        ("charges", "missing_key", 1),
        ("charges", "invalid_key", 1),
        ("charges", "conflict", 1),
        ("charges", "too_large", 1),
        ("charges", "released", 1),
        ("charges", "outcome_unknown", 1),
        ("down", "upstream_error", 1),
        ("optional", "passthrough", 1),
        ("rest", "passthrough", 1),
    ] {
        let line =
            format!("idemgate_requests_total{{outcome=\"{outcome}\",route=\"{route}\"}} {count}");
        assert!(text.contains(&line), "missing `{line}` in:\n{text}");
    }
    assert!(text.contains("idemgate_request_duration_seconds_bucket"));
    assert!(text.contains("idemgate_upstream_duration_seconds_bucket"));
    assert!(text.contains("idemgate_store_duration_seconds_bucket"));
    assert!(text.contains("idemgate_inflight{route=\"charges\"} 0"));
}

#[tokio::test]
async fn max_in_flight_refuses_new_keys_past_the_limit_and_frees_them() {
    let s = setup("limited").await;
    let client = s.gateway.client();
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/limited?delay_ms=600", Some("l-1"), "{}")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = client
        .post("/v1/limited?delay_ms=600", Some("l-2"), "{}")
        .await;
    assert_problem(&refused, 503, "route-overloaded");
    assert!(refused.header("retry-after").is_some());
    // A duplicate of the running key is still a conflict, not an overload.
    let dup = client
        .post("/v1/limited?delay_ms=600", Some("l-1"), "{}")
        .await;
    assert_problem(&dup, 409, "key-in-flight");
    assert_eq!(first.await.unwrap().status, 201);
    // The refused key was freed: its retry runs once the place is free.
    let retried = client
        .post("/v1/limited?delay_ms=600", Some("l-2"), "{}")
        .await;
    assert_eq!(retried.status, 201);
    assert_eq!(retried.header("idempotent-replayed"), Some("false"));
    assert_eq!(s.upstream.executions("l-1"), 1);
    assert_eq!(s.upstream.executions("l-2"), 1);
    let metrics = s.gateway.admin_client().get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_requests_total{outcome=\"overloaded\",route=\"limited\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn one_tenant_in_flight_never_blocks_another() {
    let s = setup("no-block").await;
    let client = s.gateway.client();
    let post = |auth: &'static str| {
        let client = client.clone();
        async move {
            client
                .send(
                    "POST",
                    "/v1/charges?delay_ms=600",
                    &[("idempotency-key", "busy"), ("authorization", auth)],
                    "{}",
                )
                .await
        }
    };
    let alice = tokio::spawn(post("Bearer alice"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_problem(&post("Bearer alice").await, 409, "key-in-flight");
    let bob = post("Bearer bob").await;
    assert_eq!(
        bob.status,
        201,
        "another tenant's key in flight must not block: {}",
        bob.text()
    );
    assert_eq!(bob.header("idempotent-replayed"), Some("false"));
    assert_eq!(alice.await.unwrap().status, 201);
    assert_eq!(s.upstream.executions("busy"), 2);
}

//! Every request body the gateway reads whole counts against
//! `max_buffered_bodies`, however it came: a small pass-through body read
//! before it is forwarded (over HTTP/2, up to 200 of them per connection),
//! and a body that arrived with its head in the connection's read-ahead (a
//! pipelined HTTP/1 request). Else the bound a sidecar's memory limit is
//! sized from would leave them out.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::config::{Config, Route, Upstream};
use common::{Client, GatewayProcess, MockUpstream, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WITHIN: Duration = Duration::from_secs(10);

/// Waits until `idemgate_buffered_body_bytes` reads `bytes`.
async fn held_reaches(gateway: &GatewayProcess, bytes: u64) {
    let started = Instant::now();
    loop {
        let now = gateway.buffered_body_bytes().await;
        if now == bytes {
            return;
        }
        assert!(
            started.elapsed() < WITHIN,
            "idemgate_buffered_body_bytes {now}, never {bytes}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `idemgate_inflight` of `route` reads `n`.
async fn inflight(admin: &Client, route: &str, n: u32) {
    let line = format!("idemgate_inflight{{route=\"{route}\"}} {n}");
    let started = Instant::now();
    while !admin.get("/metrics").await.text().contains(&line) {
        assert!(started.elapsed() < WITHIN, "never {line}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Small pass-through bodies (16 KiB, read whole before they are forwarded)
/// on the streams of one HTTP/2 connection, all waiting for the upstream's
/// one connection: each holds its bytes of the budget from its read until it
/// is sent on, and the one past the room left is refused 503
/// `gateway-overloaded` at once, nothing of it forwarded. Once the upstream
/// is free the others go on, and every byte is given back.
#[tokio::test(flavor = "multi_thread")]
async fn small_pass_through_bodies_on_http2_streams_count_against_the_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("budget-h2-pass-through");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        // Six bodies of 16 KiB, and room for their heads (HTTP/2 heads
        // count too, about 0.5 KiB each here).
        .server("max_buffered_bodies", "104KiB")
        .upstream(
            Upstream::api()
                .timeout("5s")
                .set("connect_timeout", "4s")
                .set("max_connections", 1),
        )
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("uploads", "/v1/uploads").plain());
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    let admin = gateway.admin_client();

    // The upstream's one connection, busy for 2 s.
    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=2000", Some("slow"), "{}")
                .await
        })
    };
    inflight(&admin, "charges", 1).await;

    let mut h2 = common::h2::connect(gateway.addr).await;
    let body = Bytes::from(vec![b'u'; 16 * 1024]);
    let mut answers = Vec::new();
    for n in 0..6 {
        let request = http::Request::post(format!("http://{}/v1/uploads?n={n}", gateway.addr))
            .header("content-length", body.len())
            .body(())
            .expect("request");
        let (answer, mut upload) = h2.send_request(request, false).expect("sent");
        upload.send_data(body.clone(), true).expect("body");
        answers.push(answer);
        h2 = h2.ready().await.expect("ready");
    }
    // Six bodies of 16 KiB and their heads: less than 8 KiB is left.
    let started = Instant::now();
    while gateway.buffered_body_bytes().await < 6 * 16 * 1024 {
        assert!(started.elapsed() < WITHIN, "six bodies never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held = gateway.buffered_body_bytes().await;
    assert!(held > 96 * 1024 && held < 104 * 1024, "{held}");

    // A seventh does not fit: refused at once, while the others still wait.
    let request = http::Request::post(format!("http://{}/v1/uploads?n=6", gateway.addr))
        .header("content-length", body.len())
        .body(())
        .expect("request");
    let (refused, mut upload) = h2.send_request(request, false).expect("sent");
    upload.send_data(body.clone(), true).expect("body");
    let refused = tokio::time::timeout(Duration::from_secs(1), refused)
        .await
        .expect("refused at once, not after the wait")
        .expect("an answer");
    assert_eq!(refused.status(), 503);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let problem: serde_json::Value =
        serde_json::from_slice(&common::h2::body(refused).await).expect("a problem document");
    assert_eq!(problem["code"], "gateway-overloaded");

    assert_eq!(slow.await.expect("slow").status, 201);
    for answer in answers {
        let answer = tokio::time::timeout(WITHIN, answer)
            .await
            .expect("an answer in time")
            .expect("an answer");
        assert!(answer.status().is_success(), "{}", answer.status());
    }
    held_reaches(&gateway, 0).await;
    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_requests_total{outcome=\"overloaded\",route=\"uploads\"} 1"),
        "{metrics}"
    );
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A keyed request pipelined behind another on one HTTP/1 connection: its
/// body is read ahead with its head while the first is handled (up to the
/// head's buffer, tens of KiB), and counts against the budget once it is
/// its request's, held while it waits for the upstream's one connection
/// and given back once sent on.
#[tokio::test(flavor = "multi_thread")]
async fn a_pipelined_body_read_ahead_with_its_head_counts_against_the_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("budget-pipelined");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "64KiB")
        .upstream(
            Upstream::api()
                .timeout("5s")
                .set("connect_timeout", "4s")
                .set("max_connections", 1),
        )
        .upstream(Upstream::new("side", "{upstream}").timeout("5s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::new("side", "side").path_prefix("/v1/side").plain());
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    let admin = gateway.admin_client();

    // `api`'s one connection, busy for 3 s.
    let slow = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=3000", Some("slow"), "{}")
                .await
        })
    };
    inflight(&admin, "charges", 1).await;

    // One write: a request that takes 800 ms on `side`, and behind it a
    // keyed one with a 30 KiB body, read ahead meanwhile.
    let body = format!("{{\"pad\":\"{}\"}}", "p".repeat(30 * 1024));
    let pipelined = format!(
        "GET /v1/side?delay_ms=800 HTTP/1.1\r\nHost: gw\r\n\r\n\
         POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: piped\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream
        .write_all(pipelined.as_bytes())
        .await
        .expect("pipelined");
    // The second now waits for `api`, holding its body.
    inflight(&admin, "charges", 2).await;
    assert_eq!(gateway.buffered_body_bytes().await, body.len() as u64);

    // A body that does not fit beside it is refused.
    let other = format!("{{\"pad\":\"{}\"}}", "o".repeat(40 * 1024));
    let refused = client.post("/v1/charges", Some("other"), &other).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "gateway-overloaded");

    assert_eq!(slow.await.expect("slow").status, 201);
    // Both answers, in order: the first's, then the keyed one's.
    let mut read = String::new();
    let started = Instant::now();
    while read.matches("HTTP/1.1 ").count() < 2 {
        assert!(started.elapsed() < WITHIN, "{read}");
        let mut buf = vec![0u8; 16 * 1024];
        let n = tokio::time::timeout(WITHIN, stream.read(&mut buf))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "closed: {read}");
        read.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(read.matches("HTTP/1.1 2").count(), 2, "{read}");
    assert_eq!(upstream.executions("piped"), 1);
    held_reaches(&gateway, 0).await;
}

/// The heads of HTTP/2 streams that wait count against the budget: a
/// connection may hold 200 of them at once, each up to `max_header_bytes`
/// (held about twice in memory), which no other bound covers. Keyed
/// requests with 30 KiB heads waiting on a slow upstream fill a 200 KiB
/// budget after a few; the next is refused 503 `gateway-overloaded` at
/// once, nothing of it forwarded, while the others go on; every byte is
/// given back.
#[tokio::test(flavor = "multi_thread")]
async fn heads_of_waiting_http2_streams_count_against_the_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("budget-h2-heads");
    let config = Config::new()
        .server("max_request_body", "1KiB")
        .server("max_buffered_bodies", "200KiB")
        .upstream(Upstream::api().timeout("5s").set("max_connections", 16))
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let admin = gateway.admin_client();
    let pad = "p".repeat(30 * 1024);

    let mut h2 = common::h2::connect(gateway.addr).await;
    let mut waiting = Vec::new();
    let (refused, refused_key) = loop {
        let n = waiting.len();
        assert!(
            n < 7,
            "{n} heads of 30 KiB held, none refused by a 200 KiB budget"
        );
        let key = format!("head-{n}");
        let request =
            http::Request::post(format!("http://{}/v1/charges?delay_ms=2000", gateway.addr))
                .header("idempotency-key", &key)
                .header("content-type", "application/json")
                .header("x-pad", &pad)
                .body(())
                .expect("request");
        let (answer, mut upload) = h2.send_request(request, false).expect("sent");
        upload
            .send_data(Bytes::from_static(b"{}"), true)
            .expect("body");
        h2 = h2.ready().await.expect("ready");
        let answer = tokio::spawn(answer);
        inflight_or_answered(&admin, n as u32 + 1, &answer).await;
        if answer.is_finished() {
            break (answer.await.expect("task").expect("an answer"), key);
        }
        waiting.push((answer, key));
    };
    assert!(!waiting.is_empty(), "the first head fits");
    let held = gateway.buffered_body_bytes().await;
    assert!(
        held >= waiting.len() as u64 * 30 * 1024,
        "{held} bytes held by {} heads of 30 KiB",
        waiting.len()
    );
    assert_eq!(refused.status(), 503);
    let problem: serde_json::Value =
        serde_json::from_slice(&common::h2::body(refused).await).expect("a problem document");
    assert_eq!(problem["code"], "gateway-overloaded");
    for (answer, key) in waiting {
        let answer = tokio::time::timeout(WITHIN, answer)
            .await
            .expect("an answer in time")
            .expect("task")
            .expect("an answer");
        assert_eq!(answer.status(), 201);
        assert_eq!(upstream.executions(&key), 1);
    }
    assert_eq!(
        upstream.executions(&refused_key),
        0,
        "the refused one was not forwarded"
    );
    held_reaches(&gateway, 0).await;
}

/// Waits until `n` requests of `charges` are in flight, or `answer` came.
async fn inflight_or_answered<T>(admin: &Client, n: u32, answer: &tokio::task::JoinHandle<T>) {
    let line = format!("idemgate_inflight{{route=\"charges\"}} {n}");
    let started = Instant::now();
    while !answer.is_finished() && !admin.get("/metrics").await.text().contains(&line) {
        assert!(started.elapsed() < WITHIN, "never {line}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

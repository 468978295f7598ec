//! HTTP/2 clients (h2c with prior knowledge): the stream limit they are
//! told, and streams they reset: a stream reset before the end of its
//! request is a request given up, never a whole one, and its key is not left
//! held by nobody.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::config::{Config, Route, Upstream};
use common::{Client, GatewayProcess, MockUpstream, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WITHIN: Duration = Duration::from_secs(10);

/// A lease much longer than any wait here: a key left held shows as 409.
fn config() -> Config {
    Config::new()
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "60s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("rest", "/").plain())
}

/// What an HTTP/1 upstream got of one request: its head and body bytes,
/// and whether the body was ended (the last chunk) rather than cut off.
async fn one_request(listener: TcpListener) -> (String, bool) {
    let (mut stream, _) = listener.accept().await.expect("accept");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if got.ends_with(b"\r\n0\r\n\r\n") {
            return (String::from_utf8_lossy(&got).into_owned(), true);
        }
        match tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

/// hyper ends a request body cleanly on `RST_STREAM(NO_ERROR)` (what a
/// server sends after an early answer; Envoy sends it to cancel): the body
/// of no declared length, cut where the client stopped, went to an HTTP/1
/// upstream as a whole chunked request, its last chunk written.
#[tokio::test]
async fn a_body_cut_by_a_no_error_reset_is_not_forwarded_whole() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream = format!("http://{}", listener.local_addr().expect("addr"));
    let dir = TestDir::new("h2-reset-cut");
    let gateway = GatewayProcess::start(&dir, &upstream, &config());
    let received = tokio::spawn(one_request(listener));

    let mut client = common::h2::connect(gateway.addr).await;
    let request = http::Request::post(format!("http://{}/upload", gateway.addr))
        .body(())
        .expect("request");
    let (_answer, mut upload) = client.send_request(request, false).expect("sent");
    upload
        .send_data(Bytes::from_static(b"first half"), false)
        .expect("first half");
    // Give the gateway the time to forward the head and the first bytes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    upload.send_reset(h2::Reason::NO_ERROR);

    let (got, ended) = tokio::time::timeout(WITHIN, received)
        .await
        .expect("the upstream's read ends")
        .expect("upstream task");
    assert!(got.contains("first half"), "not forwarded at all: {got}");
    assert!(
        !ended,
        "a cut body was forwarded as a whole request:\n{got}"
    );
    assert!(!gateway.log_text().contains("panicked"));
}

/// The same with a declared length, on a keyed route: the cut body was
/// taken whole, its key reserved under the fingerprint of what had come,
/// and the client's retry with the whole body answered 422 until the
/// lease ran out. The cut request is not run and holds nothing.
#[tokio::test]
async fn a_keyed_body_cut_by_a_no_error_reset_reserves_nothing() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-reset-keyed");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(90));

    let mut client = common::h2::connect(gateway.addr).await;
    let request = http::Request::post(format!("http://{}/v1/charges", gateway.addr))
        .header("idempotency-key", "cut-1")
        .header("content-length", body.len().to_string())
        .body(())
        .expect("request");
    let (_answer, mut upload) = client.send_request(request, false).expect("sent");
    upload
        .send_data(Bytes::copy_from_slice(&body.as_bytes()[..50]), false)
        .expect("first part");
    tokio::time::sleep(Duration::from_millis(300)).await;
    upload.send_reset(h2::Reason::NO_ERROR);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let retry = Client::h2c(gateway.addr)
        .post("/v1/charges", Some("cut-1"), &body)
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.headers["idempotent-replayed"], "false");
    assert_eq!(upstream.executions("cut-1"), 1);
    assert!(!gateway.log_text().contains("panicked"));
}

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("small").to_be_bytes();
    let mut bytes = vec![length[1], length[2], length[3], kind, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A header block of literal fields, none indexed (RFC 7541 §6.2.2).
fn header_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0);
        block.push(u8::try_from(name.len()).expect("short"));
        block.extend_from_slice(name.as_bytes());
        block.push(u8::try_from(value.len()).expect("short"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// A client that resets its stream (`CANCEL`, as on a timeout) right
/// behind a whole keyed request: the gateway reads the request, then hyper
/// drops its handler while the store is reserving the key. The key stayed
/// in flight with nothing running it, and every retry got 409 until the
/// lease ran out (60 s here).
#[tokio::test]
async fn a_stream_reset_while_its_key_is_reserved_leaves_the_key_free() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-reset-reserving");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    let authority = gateway.addr.to_string();
    for attempt in 0..5 {
        let key = format!("reset-{attempt}");
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        // Preface, empty SETTINGS, then HEADERS, DATA (END_STREAM) and
        // RST_STREAM(CANCEL) of stream 1 in one write.
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(0x4, 0, 0, &[]));
        let block = header_block(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", &authority),
            (":path", "/v1/charges"),
            ("idempotency-key", &key),
            ("content-length", "2"),
        ]);
        bytes.extend(frame(0x1, 0x4, 1, &block));
        bytes.extend(frame(0x0, 0x1, 1, b"{}"));
        bytes.extend(frame(0x3, 0, 1, &8u32.to_be_bytes()));
        stream.write_all(&bytes).await.expect("write");
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(stream);

        let retry = Client::h2c(gateway.addr)
            .post("/v1/charges", Some(&key), "{}")
            .await;
        assert!(
            retry.status.is_success(),
            "{key}: the key was left held: {} {}",
            retry.status,
            retry.text()
        );
        assert_eq!(upstream.executions(&key), 1, "{key}");
    }
    assert!(!gateway.log_text().contains("panicked"));
}

/// A request with neither `:authority` nor `host` is malformed (RFC 9113
/// §8.3.1), as an HTTP/1.1 request without `Host` is: it went on under the
/// upstream's host instead of being refused.
#[tokio::test]
async fn a_request_that_names_no_host_is_refused() {
    assert_refused_with_400(
        "h2-no-host",
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/anything"),
        ],
    )
    .await;
}

/// Sends one request of `fields` (a GET, no body) on a fresh connection and
/// asserts the answer is 400 and nothing was forwarded.
async fn assert_refused_with_400(name: &str, fields: &[(&str, &str)]) {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new(name);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    bytes.extend(frame(0x1, 0x4 | 0x1, 1, &header_block(fields)));
    stream.write_all(&bytes).await.expect("write");
    assert_eq!(read_status(&mut stream).await, Some(0x8c), "not a 400");
    assert_eq!(upstream.total(), 0, "forwarded");
}

/// Two `host` fields and no `:authority` that name two hosts are no one
/// host (RFC 9113 §8.3.1; over HTTP/1.1 a second `Host` is refused 400):
/// the request went on under the first, while a proxy in front that read
/// the last one had routed or authorized it as the other's.
#[tokio::test]
async fn two_host_fields_that_disagree_are_refused() {
    assert_refused_with_400(
        "h2-two-hosts",
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/anything"),
            ("host", "a.example"),
            ("host", "b.example"),
        ],
    )
    .await;
}

/// The first byte of the first answer's HEADERS block that `stream` reads
/// within [`WITHIN`]: 0x8c for `:status` 400 (static entry 12).
async fn read_status(stream: &mut TcpStream) -> Option<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
        if let Some(status) = first_status(&got) {
            return Some(status);
        }
    }
}

/// The first byte of the first HEADERS frame's block, when it has come.
fn first_status(bytes: &[u8]) -> Option<u8> {
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let length = usize::from(bytes[at]) << 16
            | usize::from(bytes[at + 1]) << 8
            | usize::from(bytes[at + 2]);
        if bytes[at + 3] == 0x1 {
            return bytes.get(at + 9).copied();
        }
        at += 9 + length;
    }
    None
}

/// A client is told its stream limit in the gateway's SETTINGS: 200 per
/// connection, written out rather than left to hyper's default
/// (docs/behaviour.md).
#[tokio::test]
async fn a_client_is_told_two_hundred_streams_per_connection() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-stream-limit");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    let tcp = TcpStream::connect(gateway.addr).await.expect("connect");
    let (_client, mut connection) = h2::client::handshake(tcp).await.expect("handshake");
    let deadline = tokio::time::Instant::now() + WITHIN;
    // The limit is known once the gateway's SETTINGS are read, which happens
    // while the connection is driven.
    while connection.max_concurrent_send_streams() != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "told {} streams",
            connection.max_concurrent_send_streams()
        );
        let _ = tokio::time::timeout(Duration::from_millis(50), &mut connection).await;
    }
}

/// docs/behaviour.md, "Memory": a client may send 1 MiB of request bodies
/// ahead of the gateway's reads, on one stream and on its whole connection
/// alike: a second stream finds no room while the first holds it all.
#[tokio::test]
async fn a_client_may_send_one_mib_of_bodies_ahead_per_connection() {
    const MIB: usize = 1024 * 1024;
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-window");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    let tcp = TcpStream::connect(gateway.addr).await.expect("connect");
    // The client's own bound on bytes it buffers (400 KiB) is not measured.
    let (client, connection) = h2::client::Builder::new()
        .max_send_buffer_size(4 * MIB)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let mut open = |key: &str| {
        // Keyed: the gateway waits for the body, and answers nothing first.
        let request = http::Request::post(format!("http://{}/v1/charges", gateway.addr))
            .header("idempotency-key", key)
            .body(())
            .expect("request");
        let (_answer, send) = client.send_request(request, false).expect("sent");
        send
    };
    let mut first = open("w1");
    first.reserve_capacity(4 * MIB);
    let deadline = tokio::time::Instant::now() + WITHIN;
    // Granted as the gateway's SETTINGS and WINDOW_UPDATE arrive.
    while first.capacity() < MIB && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(first.capacity(), MIB, "room on one stream");
    let mut second = open("w2");
    second.reserve_capacity(MIB);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(second.capacity(), 0, "room left on the connection");
}

/// A HEAD answer carries no body over HTTP/2 as over HTTP/1 (RFC 9110
/// §9.3.2; RFC 9113 §8.1.1 has content in one malformed, and curl resets
/// the stream with PROTOCOL_ERROR): the gateway's own answers, built as for
/// GET (a route's 404, the probes, `/metrics`), go out as their head only,
/// the length a GET would get kept where the handler gave it.
#[tokio::test]
async fn head_answers_carry_no_body() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-head");
    let only_charges = Config::new()
        .upstream(Upstream::api().timeout("5s"))
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &only_charges);
    for (addr, path, status) in [
        (gateway.addr, "/no-route", 404),
        (gateway.admin, "/healthz", 200),
        (gateway.admin, "/metrics", 200),
    ] {
        let mut client = common::h2::connect(addr).await;
        let request = http::Request::head(format!("http://gw.example{path}"))
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), status, "HEAD {path}");
        let length = answer.headers().get("content-length").cloned();
        let bytes = common::h2::body(answer).await;
        assert!(bytes.is_empty(), "HEAD {path} got a body: {bytes:?}");
        if addr == gateway.admin {
            let length = length.expect("a Content-Length");
            let length: usize = length.to_str().unwrap().parse().unwrap();
            assert!(length > 0, "HEAD {path}");
        }
    }
    assert_eq!(upstream.total(), 0, "forwarded");
}

/// A gateway whose `header_read_timeout` (the stalled-answer check's
/// period) is 1 s, in front of a mock upstream on a pass-through route.
async fn one_second_periods(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    let quick = Config::new()
        .server("header_read_timeout", "1s")
        .upstream(Upstream::api().timeout("30s"))
        .route(Route::api("rest", "/").plain());
    GatewayProcess::start_fresh(name, &quick).await
}

/// A client that keeps its flow-control window shut, so none of any answer
/// can be sent, is cut off once it took nothing for `header_read_timeout`
/// however many new answers it has the gateway make meanwhile: one that
/// reset a stalled stream and opened another now and then was never cut
/// off, and held an upstream request for each of its streams for good (a
/// few such connections take every one of an upstream's connections).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_opens_its_window_is_cut_off_however_many_answers_it_starts() {
    let (_dir, _upstream, gateway) = one_second_periods("h2-window-shut-churn").await;
    let tcp = TcpStream::connect(gateway.addr).await.expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("handshake");
    let mut connection = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = || {
        http::Request::get(format!("http://{}/big?bytes=100000", gateway.addr))
            .body(())
            .expect("request")
    };
    // Three streams held for good, and one reset and opened anew each time.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(client.send_request(request(), true).expect("sent").0);
    }
    let mut churned = None;
    let started = tokio::time::Instant::now();
    let ended = loop {
        // Well past the bound (one to two periods of 1 s).
        if started.elapsed() > Duration::from_secs(8) {
            break false;
        }
        // Dropped, the stream before is reset.
        match client.send_request(request(), true) {
            Ok((answer, _)) => churned = Some(answer),
            Err(_) => break true,
        }
        if tokio::time::timeout(Duration::from_millis(300), &mut connection)
            .await
            .is_ok()
        {
            break true;
        }
    };
    assert!(
        ended,
        "a connection whose answers never moved was left open for {:?}",
        started.elapsed()
    );
    drop((stalled, churned));
    assert!(!gateway.log_text().contains("panicked"));
}

/// A client that takes its answer slowly, a little at a time, through a
/// small window, over several periods of `header_read_timeout`, is not cut
/// off: only an answer of which nothing is taken for a whole period is
/// (the test above).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_takes_its_answer_slowly_is_not_cut_off() {
    let (_dir, _upstream, gateway) = one_second_periods("h2-window-slow").await;
    let tcp = TcpStream::connect(gateway.addr).await.expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(16 * 1024)
        .initial_connection_window_size(16 * 1024)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let total = 400_000;
    let request = http::Request::get(format!("http://{}/big?bytes={total}", gateway.addr))
        .body(())
        .expect("request");
    let (answer, _) = client.send_request(request, true).expect("sent");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("a head in time")
        .expect("a head");
    let mut body = answer.into_body();
    let started = tokio::time::Instant::now();
    let mut got = 0;
    // 16 KiB every 100 ms: some 2.5 s, over two periods.
    while let Some(chunk) = tokio::time::timeout(WITHIN, body.data())
        .await
        .expect("more in time")
    {
        let chunk = chunk.expect("not cut off");
        got += chunk.len();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    assert_eq!(got, total, "cut short after {:?}", started.elapsed());
    assert!(started.elapsed() > Duration::from_secs(2));
}

/// Rapid reset (CVE-2023-44487): each connection that opens and cancels
/// streams faster than they are accepted is closed. An attacker opens such
/// connections as fast as it likes, so that is logged once with its cause,
/// not once per connection (docs/operating.md#failures-that-repeat), and
/// h2's own warning about it too.
#[tokio::test]
async fn connections_closed_for_rapid_reset_are_logged_once_not_each() {
    let (_dir, _upstream, gateway) =
        GatewayProcess::start_fresh("rapid-reset-log", &config()).await;
    // HEADERS (POST, http, /, :authority "t"; END_STREAM | END_HEADERS)
    // and RST_STREAM(CANCEL) for 60 streams, all in one write.
    let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    flood.extend(frame(0x4, 0, 0, &[]));
    for n in 0..60u32 {
        let stream = 1 + 2 * n;
        flood.extend(frame(
            0x1,
            0x5,
            stream,
            &[0x83, 0x86, 0x84, 0x41, 0x01, b't'],
        ));
        flood.extend(frame(0x3, 0, stream, &8u32.to_be_bytes()));
    }
    for _ in 0..30 {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        stream.write_all(&flood).await.expect("write");
        // Until the gateway closes it (its GOAWAY, then EOF).
        let mut buf = [0u8; 4096];
        while let Ok(Ok(n)) = tokio::time::timeout(WITHIN, stream.read(&mut buf)).await {
            if n == 0 {
                break;
            }
        }
    }
    // Still serving.
    assert!(gateway.client().get("/after").await.status.is_success());
    // Written once a connection's task sees its end, which the client may
    // see first.
    gateway.logged_line("rapid reset", WITHIN).await;
    let log = gateway.log_text();
    let ours: Vec<&str> = log.lines().filter(|l| l.contains("rapid reset")).collect();
    assert_eq!(ours.len(), 1, "{log}");
    assert!(
        ours[0].contains("WARN") && ours[0].contains("listener=\"data\""),
        "{}",
        ours[0]
    );
    assert!(
        ours[0].contains("excessive load"),
        "names the cause: {}",
        ours[0]
    );
    let h2: Vec<&str> = log.lines().filter(|l| l.contains("h2::")).collect();
    assert!(h2.len() <= 1, "{log}");
}

/// hyper's HTTP/2 layer closes a connection with `ENHANCE_YOUR_CALM` for
/// more than rapid reset: a header block in more CONTINUATION frames than
/// its bound allows (a client's 200 KiB of cookies does that, as does the
/// CONTINUATION flood of CVE-2024-27316), a header list far over its
/// bound, a flood of empty DATA frames, too many streams it had to refuse.
/// Every one was logged as "the client reset too many streams (rapid
/// reset)", sending an operator after an attack that was not there; the
/// closed connection does not tell which it was, so the line names them all.
#[tokio::test]
async fn a_header_block_too_long_is_not_logged_as_a_rapid_reset() {
    let (_dir, _upstream, gateway) =
        GatewayProcess::start_fresh("continuation-flood-log", &config()).await;
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    // HEADERS without END_HEADERS, then CONTINUATION frames past the bound
    // (about ten for the default 32 KiB `max_header_bytes`).
    let authority = gateway.addr.to_string();
    let block = header_block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", &authority),
        (":path", "/cookies"),
    ]);
    bytes.extend(frame(0x1, 0x1, 1, &block));
    for n in 0..40 {
        // Values under 128 bytes: `header_block` writes one-byte lengths.
        let cookie = format!("c{n}={}", "v".repeat(100));
        bytes.extend(frame(0x9, 0, 1, &header_block(&[("cookie", &cookie)])));
    }
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream.write_all(&bytes).await.expect("write");
    // Until the gateway closes it (its GOAWAY, then EOF).
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(WITHIN, stream.read(&mut buf)).await {
        if n == 0 {
            break;
        }
    }
    assert!(gateway.client().get("/after").await.status.is_success());
    let line = gateway
        .logged_line("excessive load", Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("not logged: {}", gateway.log_text()));
    assert!(
        !line.contains("the client reset too many streams (rapid reset)"),
        "{line}"
    );
    assert!(line.contains("CONTINUATION"), "{line}");
}

/// An idle HTTP/2 connection whose client answers nothing after the
/// shutdown's GOAWAY (a peer gone without a FIN, or a client that reads its
/// socket only while it waits for an answer) does not hold the process for
/// the whole `shutdown_grace`: with nothing in progress on it, it is closed
/// a moment after the GOAWAY, as an idle HTTP/1 connection is closed at
/// once. It held the drain 30 s here, and logged the grace as elapsed.
#[tokio::test]
async fn an_idle_http2_client_deaf_to_the_goaway_does_not_hold_the_shutdown() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("h2-deaf-goaway");
    let gateway = GatewayProcess::start(
        &dir,
        &upstream.url(),
        &config().server("shutdown_grace", "30s"),
    );
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    let authority = gateway.addr.to_string();
    let block = header_block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", &authority),
        (":path", "/anything"),
    ]);
    bytes.extend(frame(0x1, 0x4 | 0x1, 1, &block));
    stream.write_all(&bytes).await.expect("write");
    // The answer, to its end: the last frame of stream 1 (END_STREAM).
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    let answered = |read: &[u8]| {
        let mut at = 0;
        while read.len() >= at + 9 {
            let length = usize::from(read[at]) << 16
                | usize::from(read[at + 1]) << 8
                | usize::from(read[at + 2]);
            let (kind, flags) = (read[at + 3], read[at + 4]);
            let stream =
                u32::from_be_bytes([read[at + 5], read[at + 6], read[at + 7], read[at + 8]]);
            if stream == 1 && kind <= 1 && flags & 0x1 != 0 {
                return true;
            }
            at += 9 + length;
        }
        false
    };
    while !answered(&read) {
        let n = tokio::time::timeout(WITHIN, stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed before its answer");
        read.extend_from_slice(&buf[..n]);
    }
    // From here on the client reads nothing: the GOAWAY's PING goes unanswered.
    gateway.terminate_within(Duration::from_secs(8)).await;
    drop(stream);
}

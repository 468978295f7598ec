//! The gateway's own HTTP/1 server connection, as clients other than a
//! well-behaved HTTP/1.1 library use it: pipelining, HTTP/1.0, Expect,
//! idle keep-alive.

mod common;

use std::time::{Duration, Instant};

use common::raw;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WITHIN: Duration = Duration::from_secs(5);

/// Reads until `count` answers have begun and the last is complete.
async fn read_answers(stream: &mut TcpStream, count: usize) -> String {
    let deadline = Instant::now() + WITHIN;
    let mut text = String::new();
    let mut buf = vec![0u8; 16 * 1024];
    while Instant::now() < deadline {
        if text.matches("HTTP/1.1 ").count() >= count && text.trim_end().ends_with('}') {
            break;
        }
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
    }
    text
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (_dir, upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-pipelined",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream
        .write_all(
            b"GET /things/1 HTTP/1.1\r\nHost: gw\r\n\r\nPOST /things/2 HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}GET /things/3 HTTP/1.1\r\nHost: gw\r\n\r\n",
        )
        .await
        .expect("write");
    let text = read_answers(&mut stream, 3).await;
    let at = |path: &str| {
        text.find(path)
            .unwrap_or_else(|| panic!("{path} missing: {text}"))
    };
    assert!(
        at("/things/1") < at("/things/2") && at("/things/2") < at("/things/3"),
        "{text}"
    );
    assert_eq!(upstream.total(), 3);
}

#[tokio::test]
async fn http10_clients_close_unless_they_ask_to_keep_alive() {
    let (_dir, _upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-http10",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream
        .write_all(b"GET /things/a HTTP/1.0\r\n\r\n")
        .await
        .expect("write");
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(reply.status, Some(201), "{}", reply.text);
    assert!(
        raw::wait_closed(&mut stream, WITHIN).await,
        "HTTP/1.0 left open"
    );

    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    for i in 0..2 {
        stream
            .write_all(
                format!("GET /things/{i} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").as_bytes(),
            )
            .await
            .expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(201), "{}", reply.text);
        assert_eq!(reply.header("connection").as_deref(), Some("keep-alive"));
    }
}

#[tokio::test]
async fn expect_continue_gets_a_go_ahead_before_the_body() {
    let (_dir, upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-expect",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream
        .write_all(
            b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: expect-1\r\nContent-Type: application/json\r\nContent-Length: 12\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .expect("write");
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(WITHIN, stream.read(&mut buf))
        .await
        .expect("a go-ahead in time")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 100 Continue\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    stream.write_all(b"{\"amount\":1}").await.expect("write");
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(reply.status, Some(201), "{}", reply.text);
    assert_eq!(upstream.executions("expect-1"), 1);
    // The gateway answered the expectation; the upstream, which gets the
    // body whole, is not asked for one of its own.
    assert_eq!(upstream.last_header("expect"), None);
}

/// A request the gateway answers without its body (413 on the declared
/// length, 400 for an invalid key) gets that answer in place of the
/// go-ahead: the client, still waiting, never sends the body (RFC 9110
/// §10.1.1).
#[tokio::test]
async fn expect_continue_answered_without_the_body_gets_no_go_ahead() {
    let (_dir, upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-expect-early",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let cases: [(&[u8], &[u8], u16); 2] = [
        (
            b"Idempotency-Key: big-1\r\n",
            b"Content-Length: 2097152\r\n",
            413,
        ),
        (b"Idempotency-Key: a, b\r\n", b"Content-Length: 12\r\n", 400),
    ];
    for (key, length, status) in cases {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        let mut head =
            b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n".to_vec();
        head.extend_from_slice(key);
        head.extend_from_slice(length);
        head.extend_from_slice(b"Expect: 100-continue\r\n\r\n");
        stream.write_all(&head).await.expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(status), "{}", reply.text);
        assert!(!reply.text.contains("100 Continue"), "{}", reply.text);
        assert_eq!(reply.header("connection").as_deref(), Some("close"));
    }
    assert_eq!(upstream.total(), 0);
}

#[tokio::test]
async fn idle_keep_alive_connections_close_after_the_header_read_timeout() {
    let config = common::config::Config::charges_and_rest().server("header_read_timeout", "500ms");
    let (_dir, _upstream, gateway) = common::GatewayProcess::start_fresh("h1-idle", &config).await;
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    // The second request comes late in the idle time after the first: the
    // idle time after its answer counts from that answer, not the first's.
    for pause in [0, 300] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        stream
            .write_all(b"GET /things/1 HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(201), "{}", reply.text);
    }
    let idle = Instant::now();
    assert!(
        raw::wait_closed(&mut stream, WITHIN).await,
        "idle connection kept"
    );
    assert!(
        idle.elapsed() >= Duration::from_millis(400),
        "closed too soon"
    );
}

#[tokio::test]
async fn a_body_its_client_cuts_short_is_answered_400_not_blamed_on_the_upstream() {
    let (_dir, _upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-cut-short",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    // Above what is read whole before forwarding (or of unknown length): the
    // body streams, so the upstream already has the head when it stops.
    let cut_short: [&[u8]; 2] = [
        b"POST /things/big HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\nxxxxxxxx",
        b"POST /things/big HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n400\r\nxxxxxxxx",
    ];
    for request in cut_short {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        stream.write_all(request).await.expect("write");
        stream.write_all(&[b'x'; 1000]).await.expect("write");
        // A half-close: the client has nothing more to send and waits for the answer.
        stream.shutdown().await.expect("shutdown");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(400), "{}", reply.text);
        assert!(reply.body().contains("bad-request"), "{}", reply.text);
    }
}

/// A client that shuts down its sending side after its request (a
/// half-close) still gets its answer, pass-through and keyed alike, and
/// pipelined requests sent before the half-close are all answered.
#[tokio::test]
async fn a_half_closed_client_still_gets_its_answers() {
    let (_dir, upstream, gateway) = common::GatewayProcess::start_fresh(
        "h1-half-close",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let requests: [&[u8]; 3] = [
        b"GET /things/1 HTTP/1.1\r\nHost: gw\r\n\r\n",
        b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: half-1\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"amount\":1}",
        b"GET /things/1 HTTP/1.0\r\n\r\n",
    ];
    for request in requests {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        stream.write_all(request).await.expect("write");
        stream.shutdown().await.expect("half-close");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(
            reply.status,
            Some(201),
            "{}: {}",
            String::from_utf8_lossy(request),
            reply.text
        );
        assert!(
            raw::wait_closed(&mut stream, WITHIN).await,
            "closed after it"
        );
    }
    assert_eq!(upstream.executions("half-1"), 1);

    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream
        .write_all(
            b"GET /things/1 HTTP/1.1\r\nHost: gw\r\n\r\nGET /things/2 HTTP/1.1\r\nHost: gw\r\n\r\n",
        )
        .await
        .expect("write");
    stream.shutdown().await.expect("half-close");
    let mut answers = Vec::new();
    tokio::time::timeout(WITHIN, stream.read_to_end(&mut answers))
        .await
        .expect("closed in time")
        .expect("read");
    let text = String::from_utf8_lossy(&answers);
    assert_eq!(text.matches("HTTP/1.1 201").count(), 2, "{text}");
}

/// An answer given before the request's body was read (no route, a key
/// refused before the body was wanted)
/// closes the connection and says so (RFC 9112 §9.6); one given after the
/// whole body was read keeps the connection for the next request.
#[tokio::test]
async fn an_answer_that_leaves_the_body_unread_says_close_and_one_that_read_it_keeps_alive() {
    use common::config::{Config, Route};
    let config = Config::new()
        .server("shutdown_grace", "5s")
        .upstream(common::config::Upstream::api().timeout("1s"))
        .defaults("lock_timeout", "5s")
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("things", "/things").plain().methods(&["GET"]));
    let (_dir, upstream, gateway) =
        common::GatewayProcess::start_fresh("h1-unread-close", &config).await;
    let unread: [(&[u8], u16); 3] = [
        (b"POST /nowhere HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\nxxxx", 404),
        (b"POST /nowhere HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n400\r\nxxxx", 404),
        (
            b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: a, b\r\nContent-Length: 100000\r\n\r\nxxxx",
            400,
        ),
    ];
    for (request, status) in unread {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        stream.write_all(request).await.expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(status), "{}", reply.text);
        assert_eq!(
            reply.header("connection").as_deref(),
            Some("close"),
            "{}",
            reply.text
        );
        assert!(
            raw::wait_closed(&mut stream, WITHIN).await,
            "{status} left open"
        );
    }
    // The whole body came with the head: nothing is left unread.
    let read: [(&[u8], u16); 3] = [
        (b"POST /nowhere HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{}", 404),
        (b"POST /nowhere HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 404),
        (
            b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: a, b\r\nContent-Length: 2\r\n\r\n{}",
            400,
        ),
    ];
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    for (request, status) in read {
        stream.write_all(request).await.expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(status), "{}", reply.text);
        assert_eq!(reply.header("connection"), None, "{}", reply.text);
    }
    stream
        .write_all(b"GET /things/1 HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .expect("write");
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(reply.status, Some(201), "{}", reply.text);
    assert_eq!(upstream.total(), 1);
}

//! The gateway's own HTTP/1 client against upstreams that frame their
//! answers every way HTTP/1 allows, and some ways it does not.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{GatewayProcess, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted upstream saw.
#[derive(Default)]
struct Seen {
    connections: usize,
    /// Each request's head and its decoded body.
    requests: Vec<(String, Vec<u8>)>,
}

/// An upstream that answers each request with the bytes its `script` query
/// parameter names, written as is.
async fn scripted_upstream() -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            shared.lock().unwrap().connections += 1;
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    (url, seen)
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_until(&mut stream, &mut buf, b"\r\n\r\n").await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let script = head
            .split_once("script=")
            .and_then(|(_, rest)| rest.split([' ', '&']).next())
            .unwrap_or("")
            .to_string();
        if script == "refuse" {
            // Answers before reading the body, then neither reads nor closes.
            let _ = stream
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbig!")
                .await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            return;
        }
        if script == "continue-first" {
            // A go-ahead the upstream sends unasked (the gateway does not
            // pass a client's `Expect: 100-continue` on; RFC 9110 §15.2 has a
            // client read 1xx answers it did not ask for), then a pause that
            // lets the gateway's writes fill the socket.
            if stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let Some(body) = read_body(&mut stream, &mut buf, &head).await else {
            return;
        };
        seen.lock().unwrap().requests.push((head, body));
        let (answer, close): (&[u8], bool) = match script.as_str() {
            "chunked" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-T: 1\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
                false,
            ),
            "close" => (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the close", true),
            "http10" => (b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold!", true),
            "continue" => (
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
                false,
            ),
            "continue-first" => (b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", false),
            "gzip-chunked" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Type: text/plain\r\n\r\n5\r\nGZGZG\r\n0\r\n\r\n",
                false,
            ),
            "gzip-close" => (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nGZGZGZ", true),
            "te-and-length" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nb\r\nhello world\r\n0\r\n\r\n",
                false,
            ),
            "no-content-length" => (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false),
            "http12" => (
                b"HTTP/1.2 100 Continue\r\n\r\nHTTP/1.2 200 OK\r\nContent-Length: 4\r\n\r\nnew!",
                false,
            ),
            "http20" => (b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true),
            "http09" => (b"HTTP/0.9 200 OK\r\nContent-Length: 2\r\n\r\nok", true),
            "garbage" => (b"NOT HTTP AT ALL\r\n\r\n", true),
            "short" => (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true),
            "bad-chunk" => (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true),
            // The hostile-upstream catalogue: each is followed, on the same
            // connection, by a hidden answer that must never reach anyone.
            "both-framings" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                false,
            ),
            "look-alike" => (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\nTransfer---Encoding: chunked\r\nContent__Length: 9\r\n\r\nhello",
                false,
            ),
            "interim-flood" => (HOSTILE_FLOOD.get_or_init(interim_flood).as_slice(), false),
            "204-body" => (
                b"HTTP/1.1 204 No Content\r\nContent-Length: 43\r\n\r\n",
                false,
            ),
            "304-chunked" => (
                b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n",
                false,
            ),
            "longer" => (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                false,
            ),
            "huge-chunk" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
                false,
            ),
            "304-large-length" => (
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9000000\r\nETag: \"v2\"\r\n\r\n",
                false,
            ),
            "identity-length" => (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nok",
                false,
            ),
            "keep-alive-3s" => (
                b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=3, max=100\r\nContent-Length: 2\r\n\r\nok",
                false,
            ),
            "proxy-challenge" => (
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"inner\"\r\nProxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nConnection: X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nno",
                false,
            ),
            _ => (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false),
        };
        if stream.write_all(answer).await.is_err() || close {
            return;
        }
        if matches!(
            script.as_str(),
            "204-body" | "304-chunked" | "both-framings" | "look-alike" | "longer"
        ) {
            // What the upstream means as the rest of its answer (the body a
            // 204 announced, the length beside chunked, ...), a moment
            // later: read on the same connection, it would be taken for
            // the next answer.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled")
                .await;
        }
    }
}

static HOSTILE_FLOOD: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// A thousand interim answers, then a final one.
fn interim_flood() -> Vec<u8> {
    let mut flood = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n".repeat(1000);
    flood.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    flood
}

/// Reads until `buf` holds `marker`; the length up to its end.
async fn read_until(stream: &mut TcpStream, buf: &mut Vec<u8>, marker: &[u8]) -> Option<usize> {
    loop {
        if let Some(at) = buf.windows(marker.len()).position(|w| w == marker) {
            return Some(at + marker.len());
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn read_exact(stream: &mut TcpStream, buf: &mut Vec<u8>, length: usize) -> Option<Vec<u8>> {
    while buf.len() < length {
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf.drain(..length).collect())
}

async fn read_body(stream: &mut TcpStream, buf: &mut Vec<u8>, head: &str) -> Option<Vec<u8>> {
    let field = |name: &str| {
        head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    if field("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let end = read_until(stream, buf, b"\r\n").await?;
            let size_line = String::from_utf8_lossy(&buf[..end - 2]).to_string();
            buf.drain(..end);
            let size = usize::from_str_radix(size_line.trim(), 16).ok()?;
            let data = read_exact(stream, buf, size + 2).await?;
            if size == 0 {
                return Some(body);
            }
            body.extend_from_slice(&data[..size]);
        }
    }
    let length = field("content-length").map_or(Some(0), |v| v.parse().ok())?;
    read_exact(stream, buf, length).await
}

async fn setup(name: &str) -> (TestDir, Arc<Mutex<Seen>>, GatewayProcess) {
    let dir = TestDir::new(name);
    let (url, seen) = scripted_upstream().await;
    let gateway = GatewayProcess::start(&dir, &url, &common::config::Config::charges_and_rest());
    (dir, seen, gateway)
}

#[tokio::test]
async fn answers_framed_every_way_reach_the_client_whole() {
    let (_dir, seen, gateway) = setup("h1-framing").await;
    let client = gateway.client();
    for (script, status, body) in [
        ("chunked", 200, "hello world"),
        ("chunked", 200, "hello world"),
        ("close", 200, "until the close"),
        ("http10", 200, "old!"),
        ("continue", 201, "{}"),
        ("plain", 200, "ok"),
        ("plain", 200, "ok"),
    ] {
        let reply = client.get(&format!("/things?script={script}")).await;
        assert_eq!(reply.status, status, "{script}: {}", reply.text());
        assert_eq!(reply.text(), body, "{script}");
    }
    // The two chunked answers share a connection; the close-delimited and
    // HTTP/1.0 answers end theirs, and the answer after each opens another.
    assert_eq!(seen.lock().unwrap().connections, 3);
}

#[tokio::test]
async fn a_chunked_answer_is_stored_and_replayed_whole() {
    let (_dir, seen, gateway) = setup("h1-chunked-replay").await;
    let client = gateway.client();
    let first = client
        .post(
            "/v1/charges?script=chunked",
            Some("h1-k1"),
            r#"{"amount":1}"#,
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.text(), "hello world");
    let replay = client
        .post(
            "/v1/charges?script=chunked",
            Some("h1-k1"),
            r#"{"amount":1}"#,
        )
        .await;
    assert_eq!(replay.text(), "hello world");
    assert_eq!(replay.header("x-t"), Some("1"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(seen.lock().unwrap().requests.len(), 1);
}

#[tokio::test]
async fn answers_that_break_http_are_502_and_the_gateway_goes_on() {
    let (_dir, _seen, gateway) = setup("h1-broken").await;
    let client = gateway.client();
    for script in ["garbage", "short"] {
        let reply = client.get(&format!("/things?script={script}")).await;
        assert_eq!(reply.status, 502, "{script}: {}", reply.text());
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json"),
            "{script}"
        );
        let after = client.get("/things?script=plain").await;
        assert_eq!(after.status, 200, "after {script}");
    }
    // A chunked answer streams: the bad chunk shows only once the answer has
    // begun (here its head was still unsent, so nothing at all arrives), and
    // the client's connection is cut rather than the body ended cleanly.
    let reply = common::raw::exchange(
        gateway.addr,
        b"GET /things?script=bad-chunk HTTP/1.1\r\nHost: gw\r\n\r\n",
        Duration::from_secs(3),
    )
    .await;
    assert!(matches!(reply.status, None | Some(200)), "{}", reply.text);
    assert!(reply.closed, "{}", reply.text);
    assert!(!reply.text.ends_with("0\r\n\r\n"), "{}", reply.text);
    let after = client.get("/things?script=plain").await;
    assert_eq!(after.status, 200);
}

#[tokio::test]
async fn a_higher_minor_version_is_read_as_http_11_and_another_major_is_502() {
    let (_dir, seen, gateway) = setup("h1-minor-version").await;
    let client = gateway.client();
    for _ in 0..2 {
        let reply = client.get("/things?script=http12").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), "new!");
    }
    // Read as HTTP/1.1: the connection is kept for the next request.
    assert_eq!(seen.lock().unwrap().connections, 1);
    for script in ["http20", "http09"] {
        let reply = client.get(&format!("/things?script={script}")).await;
        assert_eq!(reply.status, 502, "{script}: {}", reply.text());
    }
}

#[tokio::test]
async fn request_bodies_keep_their_bytes_and_get_the_gateways_framing() {
    let (_dir, seen, gateway) = setup("h1-request-framing").await;
    // A small body: its length; a chunked one of unknown length: chunked,
    // with the bytes intact.
    let small = gateway
        .client()
        .send("PUT", "/things?script=plain", &[], "twelve bytes")
        .await;
    assert_eq!(small.status, 200);
    let mut raw = TcpStream::connect(gateway.addr).await.unwrap();
    raw.write_all(
        b"POST /things?script=plain HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let reply = common::raw::read_reply(&mut raw, Duration::from_secs(3)).await;
    assert_eq!(reply.status, Some(200), "{}", reply.text);
    let seen = seen.lock().unwrap();
    let (head, body) = &seen.requests[0];
    assert!(
        head.starts_with("PUT /things?script=plain HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("content-length: 12\r\n"), "{head}");
    assert_eq!(body, b"twelve bytes");
    let (head, body) = &seen.requests[1];
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    assert_eq!(body, b"abcdefg");
}

#[tokio::test]
async fn an_upstream_that_refuses_a_large_body_before_reading_it_is_relayed() {
    let (_dir, _seen, gateway) = setup("h1-early-answer").await;
    let started = std::time::Instant::now();
    let reply = gateway
        .client()
        .send("PUT", "/things?script=refuse", &[], vec![b'x'; 32 << 20])
        .await;
    assert_eq!(reply.status, 413, "{}", reply.text());
    assert_eq!(reply.text(), "big!");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// An upstream's early answer was only looked for while a write of the body
/// waited for room: one that came while the gateway waited for the client's
/// next piece (a slow upload, whose pieces all fit in the socket's buffers)
/// was held until the client finished, and a client that paused got the
/// upstream's `timeout` as a 504 for an upstream that had answered at once.
#[tokio::test]
async fn an_early_answer_is_relayed_while_the_client_is_still_sending() {
    let (_dir, _seen, gateway) = setup("h1-early-answer-slow-client").await;
    let mut raw = TcpStream::connect(gateway.addr).await.unwrap();
    raw.write_all(
        b"PUT /things?script=refuse HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000000\r\n\r\n",
    )
    .await
    .unwrap();
    raw.write_all(&[b'x'; 20_000]).await.unwrap();
    // The rest of the body does not come (yet): the answer must not wait.
    let reply = common::raw::read_reply(&mut raw, Duration::from_secs(3)).await;
    assert_eq!(reply.status, Some(413), "{}", reply.text);
    assert!(reply.text.ends_with("big!"), "{}", reply.text);
    // The body was left unread, so the connection is not kept.
    assert_eq!(reply.header("connection").as_deref(), Some("close"));
}

/// An upstream's `100 Continue` that came while
/// the gateway was still writing a large body was taken for the start of
/// the answer, so the gateway stopped sending the body and both sides
/// waited until the timeout (504; on a keyed route, a stored
/// `outcome-unknown`). curl asks for the go-ahead on every body over 1 MiB.
#[tokio::test]
async fn an_interim_answer_while_the_body_is_sent_does_not_stop_the_body() {
    let (_dir, seen, gateway) = setup("h1-continue-mid-body").await;
    let client = gateway.client();
    let reply = client
        .send(
            "PUT",
            "/things?script=continue-first",
            &[],
            vec![b'x'; 32 << 20],
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let keyed = client
        .send(
            "POST",
            "/v1/charges?script=continue-first",
            &[("idempotency-key", "continue-1")],
            vec![b'y'; 900 << 10],
        )
        .await;
    assert_eq!(keyed.status, 201, "{}", keyed.text());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.requests.len(), 2);
    assert_eq!(seen.requests[0].1.len(), 32 << 20);
    assert_eq!(seen.requests[1].1.len(), 900 << 10);
}

/// An answer with `Transfer-Encoding: gzip,
/// chunked` (or `gzip`, to the close) reached the client de-chunked with
/// its `Transfer-Encoding` dropped, so gzip bytes arrived labelled as
/// nothing, and a keyed route stored them so. An HTTP/1.1 client is now
/// told the coding; a client that cannot be (HTTP/1.0, HTTP/2) gets a 502;
/// a keyed route records the exchange as `outcome-unknown` rather than
/// store a body it cannot label.
#[tokio::test(flavor = "multi_thread")]
async fn answers_with_codings_besides_chunked_keep_them_or_are_refused() {
    let (_dir, seen, gateway) = setup("h1-codings").await;
    for (script, body) in [("gzip-chunked", "GZGZG"), ("gzip-close", "GZGZGZ")] {
        let request = format!("GET /things?script={script} HTTP/1.1\r\nHost: gw\r\n\r\n");
        let reply =
            common::raw::exchange(gateway.addr, request.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(reply.status, Some(200), "{}", reply.text);
        assert_eq!(
            reply.header("transfer-encoding").as_deref(),
            Some("gzip, chunked"),
            "{}",
            reply.text
        );
        assert_eq!(reply.header("content-length"), None, "{}", reply.text);
        assert!(
            reply
                .text
                .ends_with(&format!("\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n", body.len())),
            "{}",
            reply.text
        );

        let request = format!("GET /things?script={script} HTTP/1.0\r\nHost: gw\r\n\r\n");
        let reply =
            common::raw::exchange(gateway.addr, request.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(reply.status, Some(502), "{}", reply.text);
        assert!(reply.body().contains("upstream-error"), "{}", reply.text);

        let reply = common::Client::h2c(gateway.addr)
            .get(&format!("/things?script={script}"))
            .await;
        assert_eq!(reply.status, 502, "{}", reply.text());
    }
    let client = gateway.client();
    for _ in 0..2 {
        let reply = client
            .post("/v1/charges?script=gzip-chunked", Some("codings-1"), "{}")
            .await;
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert_eq!(reply.json()["code"], "outcome-unknown");
    }
    let keyed = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(head, _)| head.starts_with("POST"))
        .count();
    assert_eq!(keyed, 1, "the keyed request ran once");
    // The upstream connection the coded answers came on still serves.
    let after = client.get("/things?script=plain").await;
    assert_eq!(after.status, 200);
}

/// An answer with `Transfer-Encoding: chunked`
/// and a `Content-Length` (which it overrides, RFC 9112 §6.3), or a 204
/// with a `Content-Length`, had the length sent on: an HTTP/2 client got a
/// stream error instead of the answer, first-hand or replayed from the store.
#[tokio::test(flavor = "multi_thread")]
async fn a_length_beside_transfer_encoding_is_not_passed_on() {
    let (_dir, seen, gateway) = setup("h1-te-and-length").await;
    let h2 = common::Client::h2c(gateway.addr);
    let reply = h2.get("/things?script=te-and-length").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "hello world");
    for replayed in ["false", "true"] {
        let reply = h2
            .post("/v1/charges?script=te-and-length", Some("te-cl-1"), "{}")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), "hello world");
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
        assert_ne!(reply.header("content-length"), Some("3"));
    }
    // A 204 has no Content-Length (RFC 9110 §8.6), whatever the upstream said.
    let reply = h2.get("/things?script=no-content-length").await;
    assert_eq!(reply.status, 204);
    for _ in 0..2 {
        let reply = h2
            .post(
                "/v1/charges?script=no-content-length",
                Some("te-cl-2"),
                "{}",
            )
            .await;
        assert_eq!(reply.status, 204);
        assert_eq!(reply.header("content-length"), None);
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 4);
}

/// The hostile-upstream catalogue (docs/http1.md): answers an upstream
/// should never send. Each is refused (502, or the client's connection cut
/// once the answer has begun) or relayed with only what is unambiguous, on
/// pass-through and on a keyed route (where a refused answer is the stored
/// `outcome-unknown` of docs/guarantees.md, replayed, never run twice); and
/// the upstream connection is never used again after it: the answer hidden
/// behind each never reaches a client.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_upstream_answers_are_refused_or_cut_and_the_connection_is_not_reused() {
    let (_dir, seen, gateway) = setup("h1-hostile").await;
    let client = gateway.client();
    for (script, status, body) in [
        // Chunked wins (RFC 9112 §6.3), Content-Length is not passed on.
        ("both-framings", 200, "hello"),
        // The look-alikes are dropped, the real length frames.
        ("look-alike", 200, "hello"),
        ("interim-flood", 502, ""),
        ("204-body", 204, ""),
        ("304-chunked", 304, ""),
        // The bytes past the length are not read as the next answer.
        ("longer", 200, "hello"),
    ] {
        let reply = client.get(&format!("/things?script={script}")).await;
        let connections = seen.lock().unwrap().connections;
        assert_eq!(reply.status, status, "{script}: {}", reply.text());
        if status != 502 {
            assert_eq!(reply.text(), body, "{script}");
        }
        assert_eq!(reply.header("transfer_encoding"), None, "{script}");
        assert_eq!(reply.header("content__length"), None, "{script}");
        // Let a delayed hidden answer arrive, then ask again: a new
        // connection, and the plain answer, never the hidden one.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = client.get("/things?script=plain").await;
        assert_eq!(after.status, 200, "after {script}");
        assert_eq!(after.text(), "ok", "after {script}");
        assert_eq!(
            seen.lock().unwrap().connections,
            connections + 1,
            "{script}: the connection was used again"
        );
    }
    // A chunk size past 2^64: the answer's head may have left, its body is
    // cut, and the client's connection closed rather than ended cleanly.
    let reply = common::raw::exchange(
        gateway.addr,
        b"GET /things?script=huge-chunk HTTP/1.1\r\nHost: gw\r\n\r\n",
        Duration::from_secs(3),
    )
    .await;
    assert!(
        matches!(reply.status, None | Some(200) | Some(502)),
        "{}",
        reply.text
    );
    assert!(reply.closed, "{}", reply.text);
    assert!(!reply.text.contains("hello\r\n0\r\n\r\n"), "{}", reply.text);
    assert!(!reply.text.ends_with("0\r\n\r\n"), "{}", reply.text);

    // On a keyed route a refused answer is the recorded outcome-unknown:
    // the retry replays it, the upstream ran it once.
    let before = seen.lock().unwrap().requests.len();
    for attempt in 0..2 {
        let reply = client
            .post("/v1/charges?script=interim-flood", Some("hostile-1"), "{}")
            .await;
        assert_eq!(reply.status, 502, "{}", reply.text());
        assert!(reply.text().contains("outcome-unknown"), "{}", reply.text());
        let replayed = if attempt == 0 { "false" } else { "true" };
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
    }
    assert_eq!(seen.lock().unwrap().requests.len(), before + 1);
    let texts: Vec<String> = seen
        .lock()
        .unwrap()
        .requests
        .iter()
        .map(|(head, _)| head.clone())
        .collect();
    assert!(texts.iter().all(|head| !head.contains("smuggled")));
}

/// Every `Proxy-*` field of an answer was
/// dropped as hop-by-hop, so a 407 reached the client without the
/// `Proxy-Authenticate` challenge it must carry. It is end-to-end (RFC 9110
/// §11.7.1), relayed, stored and replayed; the fields that describe the
/// upstream's connection are not.
#[tokio::test]
async fn a_proxy_challenge_is_relayed_and_replayed() {
    let (_dir, seen, gateway) = setup("h1-proxy-challenge").await;
    let client = gateway.client();
    let passed = client.get("/things?script=proxy-challenge").await;
    let keyed = || {
        client.post(
            "/v1/charges?script=proxy-challenge",
            Some("proxy-challenge-1"),
            "{}",
        )
    };
    let (fresh, replayed) = (keyed().await, keyed().await);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    for reply in [passed, fresh, replayed] {
        assert_eq!(reply.status, 407, "{}", reply.text());
        assert_eq!(
            reply.header("proxy-authenticate"),
            Some("Basic realm=\"inner\"")
        );
        for hop in ["proxy-connection", "keep-alive", "x-hop", "connection"] {
            assert_eq!(reply.header(hop), None, "{hop}");
        }
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 2);
}

/// A 304 whose `Content-Length` (the
/// representation's, RFC 9110 §8.6) is over `max_stored_response` was kept
/// as an oversized answer, so its replay said `Idempotency-Replay: omitted`
/// and lost the length, though no body was left out. An answer with no
/// body to come is kept whole.
#[tokio::test]
async fn a_bodiless_answer_with_a_large_length_is_kept_whole() {
    let (_dir, seen, gateway) = setup("h1-304-large-length").await;
    let client = gateway.client();
    for replayed in ["false", "true"] {
        let reply = client
            .post("/v1/charges?script=304-large-length", Some("304-big"), "{}")
            .await;
        assert_eq!(reply.status, 304, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
        assert_eq!(reply.header("idempotency-replay"), None, "{replayed}");
        assert_eq!(reply.header("content-length"), Some("9000000"));
        assert_eq!(reply.header("etag"), Some("\"v2\""));
    }
    assert_eq!(seen.lock().unwrap().requests.len(), 1);
}

/// `Transfer-Encoding: identity` (RFC 2616's
/// "no coding", still sent by old servers) beside a `Content-Length` made
/// the answer run to the close, so on a connection the upstream kept open
/// it hung until the upstream's timeout: the client's connection was cut,
/// and a keyed route stored `504 outcome-unknown` for an answer that had
/// come whole. A field that names no coding frames nothing; the length does.
#[tokio::test]
async fn a_transfer_encoding_that_names_no_coding_is_framed_by_its_length() {
    let (_dir, seen, gateway) = setup("h1-identity").await;
    let client = gateway.client();
    let started = std::time::Instant::now();
    let passed = client.get("/things?script=identity-length").await;
    assert_eq!(passed.status, 200);
    assert_eq!(passed.text(), "ok");
    for replayed in ["false", "true"] {
        let reply = client
            .post(
                "/v1/charges?script=identity-length",
                Some("identity-1"),
                "{}",
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.text(), "ok");
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
    }
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(seen.lock().unwrap().requests.len(), 2);
}

/// An upstream that closes idle connections
/// after a few seconds (Apache and Node.js: 5 s, said in `Keep-Alive:
/// timeout=5`) had them kept and reused for 60 s, so a request could take
/// one just as the upstream closed it; a keyed POST then has an unknown
/// outcome. A connection is no longer taken within a second of the
/// timeout the upstream announced.
#[tokio::test]
async fn a_connection_is_not_reused_near_the_upstreams_keep_alive_timeout() {
    let (_dir, seen, gateway) = setup("h1-keep-alive-timeout").await;
    let client = gateway.client();
    for _ in 0..2 {
        let reply = client.get("/things?script=keep-alive-3s").await;
        assert_eq!(reply.text(), "ok");
        assert_eq!(reply.header("keep-alive"), None);
    }
    assert_eq!(seen.lock().unwrap().connections, 1, "reused while fresh");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let reply = client.get("/things?script=plain").await;
    assert_eq!(reply.text(), "ok");
    assert_eq!(
        seen.lock().unwrap().connections,
        2,
        "taken a second before the upstream's timeout"
    );
}

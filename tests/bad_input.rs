//! The bad-input catalogue: hostile or broken requests against the real
//! binary, mostly over raw TCP because a normal client cannot produce them.
//! Each must get a clear 4xx or a closed connection, never a forwarded request
//! (the counting upstream stays at 0), and never a panic.
//!
//! Who answers: the HTTP/1 parser (src/server/http1/) reads the request head,
//! so malformed request lines and headers, obs-fold, conflicting framing, a
//! missing or repeated `Host`, and heads over its buffer (twice
//! `max_header_bytes`) are refused by it (400 `bad-request`, 431
//! `header-too-large`, the connection closed); everything it accepts
//! reaches the gateway. Every refusal is problem+json (`header-too-large`,
//! `invalid-key`, `missing-key`, `body-too-large`, `request-timeout`, ...).

mod common;

use std::time::{Duration, Instant};

use common::config::{Config, Route, Upstream, raw};
use common::raw::{self, RawReply};
use common::{GatewayProcess, MockUpstream, TestDir};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn config() -> Config {
    Config::new()
        .server("max_request_body", "1KiB")
        .server("max_header_bytes", "4KiB")
        .server("header_read_timeout", "1s")
        .server("max_connections", 50)
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "5s")
        .route(Route::api("charges", "/v1/charges").set("required", true))
        .route(
            Route::api("hooks", "/hook")
                .set("key", raw("{ json_pointer = \"/id\" }"))
                .set("required", true),
        )
        .route(Route::api("rest", "/").plain())
}

const WITHIN: Duration = Duration::from_secs(10);

struct Setup {
    upstream: MockUpstream,
    gateway: GatewayProcess,
    _dir: TestDir,
}

async fn setup(name: &str) -> Setup {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new(name);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config());
    Setup {
        upstream,
        gateway,
        _dir: dir,
    }
}

impl Setup {
    async fn raw(&self, bytes: &[u8]) -> RawReply {
        raw::exchange(self.gateway.addr, bytes, WITHIN).await
    }

    /// Nothing reached the upstream and nothing panicked.
    fn assert_clean(&self) {
        assert_eq!(self.upstream.total(), 0, "a bad request was forwarded");
        self.assert_no_panic();
    }

    /// `request` (a head, and less of its body than it declares) gets 408
    /// `request-timeout` once it has sent nothing for `header_read_timeout`
    /// (1 s here), and its connection is closed.
    async fn assert_stalled_body_cut_off(&self, request: &str) {
        let mut stream = TcpStream::connect(self.gateway.addr)
            .await
            .expect("connect");
        let started = Instant::now();
        stream.write_all(request.as_bytes()).await.expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        let took = started.elapsed();
        assert_eq!(reply.status, Some(408), "{request}: {reply:?}");
        let doc: serde_json::Value = serde_json::from_str(reply.body()).expect("problem+json");
        assert_eq!(doc["code"], "request-timeout", "{doc}");
        // Plenty of slack for a loaded machine.
        assert!(
            took >= Duration::from_millis(900),
            "answered after {took:?}"
        );
        assert!(took < Duration::from_secs(8), "answered after {took:?}");
        assert!(
            raw::wait_closed(&mut stream, WITHIN).await,
            "{request}: left open"
        );
    }

    fn assert_no_panic(&self) {
        let log = self.gateway.log_text();
        assert!(!log.contains("panicked"), "the gateway panicked:\n{log}");
    }
}

fn assert_refused(case: &str, reply: &RawReply) {
    assert!(
        reply.is_refusal(),
        "{case}: expected a 4xx or a closed connection, got {reply:?}"
    );
}

/// A problem document's `code`, when the gateway (not a bare refusal of the
/// HTTP/1 parser) answered.
fn problem_code(reply: &RawReply) -> Option<String> {
    let is_problem = reply
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/problem+json"));
    if !is_problem {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_str(reply.body()).ok()?;
    doc.get("code")?.as_str().map(str::to_owned)
}

/// A keyed POST to the charges route with `extra` header lines.
fn keyed(key_line: &[u8], extra: &[u8]) -> Vec<u8> {
    let mut out = b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\n".to_vec();
    out.extend_from_slice(key_line);
    out.extend_from_slice(extra);
    out.extend_from_slice(b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_request_lines_and_headers() {
    let s = setup("bad-lines").await;
    let key = b"Idempotency-Key: k1\r\n";
    let cases: Vec<(&str, Vec<u8>)> =
        vec![
        ("garbage line", b"GARBAGE\r\n\r\n".to_vec()),
        ("binary noise", vec![0x16, 0x03, 0x01, 0x00, 0xff, 0, 0, b'\r', b'\n', b'\r', b'\n']),
        (
            "no version",
            b"POST /v1/charges\r\nIdempotency-Key: k1\r\n\r\n".to_vec(),
        ),
        (
            "double space",
            b"POST  /v1/charges HTTP/1.1\r\nIdempotency-Key: k1\r\n\r\n".to_vec(),
        ),
        (
            "control char in target",
            b"POST /v1/ch\x01arges HTTP/1.1\r\nIdempotency-Key: k1\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        (
            "space in target",
            b"POST /v1/charges x HTTP/1.1\r\nIdempotency-Key: k1\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        (
            "bad method token",
            b"PO(ST /v1/charges HTTP/1.1\r\nIdempotency-Key: k1\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        (
            "unknown version",
            b"POST /v1/charges HTTP/7.3\r\nIdempotency-Key: k1\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        ("header without colon", keyed(key, b"X-Broken header\r\n")),
        ("space before colon", keyed(key, b"X-Space : 1\r\n")),
        ("empty header name", keyed(key, b": nameless\r\n")),
        ("bad header name", keyed(key, b"X(Y): 1\r\n")),
        ("NUL in header value", keyed(key, b"X-Nul: a\x00b\r\n")),
        ("CR in header value", keyed(key, b"X-Cr: a\rb\r\n")),
        ("obs-fold", keyed(key, b"X-Folded: a\r\n b\r\n")),
        (
            "absolute-form garbage",
            b"POST http://[::1 HTTP/1.1\r\nIdempotency-Key: k1\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        (
            "CONNECT",
            b"CONNECT gw:443 HTTP/1.1\r\nHost: gw:443\r\n\r\n".to_vec(),
        ),
    ];
    for (case, bytes) in &cases {
        let reply = s.raw(bytes).await;
        assert_refused(case, &reply);
    }
    s.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn header_over_max_header_bytes() {
    let s = setup("bad-head").await;
    // Over max_header_bytes (4 KiB) but within the head buffer (8 KiB): the
    // gateway answers with its problem document.
    let pad = format!("X-Pad: {}\r\n", "p".repeat(5000));
    let reply = s
        .raw(&keyed(b"Idempotency-Key: k1\r\n", pad.as_bytes()))
        .await;
    assert_eq!(reply.status, Some(431), "{reply:?}");
    assert_eq!(problem_code(&reply).as_deref(), Some("header-too-large"));

    // Far over the head buffer: the parser answers a bare 431 (no problem
    // document; the handler never sees the request) or closes.
    let pad = format!("X-Pad: {}\r\n", "p".repeat(64 * 1024));
    let reply = s
        .raw(&keyed(b"Idempotency-Key: k2\r\n", pad.as_bytes()))
        .await;
    assert!(
        reply.status == Some(431) || (reply.status.is_none() && reply.closed),
        "{reply:?}"
    );
    // Many small headers add up the same way.
    let many: String = (0..400).map(|i| format!("X-H{i}: value\r\n")).collect();
    let reply = s
        .raw(&keyed(b"Idempotency-Key: k3\r\n", many.as_bytes()))
        .await;
    assert_refused("many headers", &reply);
    // A request line longer than the buffer.
    let long = format!(
        "POST /v1/charges?{} HTTP/1.1\r\nIdempotency-Key: k4\r\nContent-Length: 0\r\n\r\n",
        "q".repeat(20 * 1024)
    );
    assert_refused("long target", &s.raw(long.as_bytes()).await);
    s.assert_clean();
}

/// Every 431 an HTTP/1 client gets counts as `too_large` with `route=""`,
/// whether the gateway refused the head (over `max_header_bytes`) or the
/// parser did (over its buffer, or more fields than it reads): one count
/// per refused head, and in the duration histogram too. The parser's 400s
/// stay outside the outcomes, as the gateway's own do.
#[tokio::test(flavor = "multi_thread")]
async fn every_refused_head_counts_as_too_large() {
    let s = setup("head-counts").await;
    let metric = |text: &str, name: &str| -> u64 {
        let prefix = format!("{name}{{outcome=\"too_large\",route=\"\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |value| value.trim().parse().expect("a count"))
    };
    let over_limit = format!("X-Pad: {}\r\n", "p".repeat(5000));
    let over_buffer = format!("X-Pad: {}\r\n", "p".repeat(64 * 1024));
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let heads = [
        ("over max_header_bytes", over_limit),
        ("over the parser's buffer", over_buffer),
        ("more fields than the parser reads", many),
    ];
    for (counted, (case, extra)) in heads.iter().enumerate() {
        let request = format!("GET /rest HTTP/1.1\r\nHost: gw\r\n{extra}\r\n");
        let reply = s.raw(request.as_bytes()).await;
        assert_eq!(reply.status, Some(431), "{case}: {reply:?}");
        // Counted before the answer is written: read at once.
        let text = s.gateway.admin_client().get("/metrics").await.text();
        let expected = counted as u64 + 1;
        assert_eq!(metric(&text, "idemgate_requests_total"), expected, "{case}");
        assert_eq!(
            metric(&text, "idemgate_request_duration_seconds_count"),
            expected,
            "{case}"
        );
    }
    let reply = s.raw(b"NOT HTTP AT ALL\r\n\r\n").await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    let text = s.gateway.admin_client().get("/metrics").await.text();
    assert!(
        !text.contains("outcome=\"bad_request\""),
        "a 400 is no outcome"
    );
    assert_eq!(metric(&text, "idemgate_requests_total"), 3);
    s.assert_clean();
}

/// A head the HTTP/1 parser refuses gets its request line in the log, as
/// every request does (docs/operating.md, Logs): with its status, its
/// outcome (`too_large` for a 431, `-` for a 400) and a request id, so the
/// log and `idemgate_requests_total` count the same requests.
#[tokio::test(flavor = "multi_thread")]
async fn every_refused_head_has_its_request_line() {
    let s = setup("head-lines").await;
    let over_buffer = format!("X-Pad: {}\r\n", "p".repeat(64 * 1024));
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    for extra in [over_buffer, many] {
        let request = format!("GET /rest HTTP/1.1\r\nHost: gw\r\n{extra}\r\n");
        assert_eq!(s.raw(request.as_bytes()).await.status, Some(431));
    }
    assert_eq!(s.raw(b"NOT HTTP AT ALL\r\n\r\n").await.status, Some(400));
    let lines = |log: &str, status: &str| -> Vec<String> {
        log.lines()
            .filter(|line| line.contains("idemgate::gateway: request "))
            .filter(|line| line.contains(status))
            .map(str::to_owned)
            .collect()
    };
    let deadline = Instant::now() + WITHIN;
    let log = loop {
        let log = s.gateway.log_text();
        let written = lines(&log, "status=431").len() + lines(&log, "status=400").len();
        if written >= 3 || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let too_large = lines(&log, "status=431");
    let malformed = lines(&log, "status=400");
    assert_eq!((too_large.len(), malformed.len()), (2, 1), "{log}");
    for line in &too_large {
        assert!(line.contains("outcome=\"too_large\""), "{line}");
    }
    assert!(malformed[0].contains("outcome=\"-\""), "{}", malformed[0]);
    for line in too_large.iter().chain(&malformed) {
        let id = line
            .split("request_id=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{line}"
        );
    }
    s.assert_clean();
}

/// What the HTTP/1 parser refuses is answered like every other error: a
/// problem document with a stable code, and the connection closed.
#[tokio::test(flavor = "multi_thread")]
async fn parser_refusals_are_problem_documents() {
    let s = setup("parser-problems").await;
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    for (case, request, status, code) in [
        (
            "no Host in HTTP/1.1",
            "POST /rest HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_string(),
            400,
            "bad-request",
        ),
        (
            "two Host lines",
            "POST /rest HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n".into(),
            400,
            "bad-request",
        ),
        (
            "invalid Content-Length",
            "POST /rest HTTP/1.1\r\nHost: gw\r\nContent-Length: 5, 6\r\n\r\n".into(),
            400,
            "bad-request",
        ),
        (
            "garbage",
            "NOT HTTP AT ALL\r\n\r\n".into(),
            400,
            "bad-request",
        ),
        (
            "more fields than max_headers",
            format!("GET /rest HTTP/1.1\r\nHost: gw\r\n{many}\r\n"),
            431,
            "header-too-large",
        ),
    ] {
        let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
        let _ = stream.write_all(request.as_bytes()).await;
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(status), "{case}: {reply:?}");
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some(code),
            "{case}: {reply:?}"
        );
        assert_eq!(
            reply.header("connection").as_deref(),
            Some("close"),
            "{case}"
        );
        assert!(
            reply.closed || raw::wait_closed(&mut stream, WITHIN).await,
            "{case}: connection left open"
        );
    }
    // Too many fields is said as such, not as a head over a byte limit it
    // is far under; over HTTP/2 too.
    let reply = s
        .raw(format!("GET /rest HTTP/1.1\r\nHost: gw\r\n{many}\r\n").as_bytes())
        .await;
    assert!(
        reply.body().contains("more than 100 header fields"),
        "{reply:?}"
    );
    let mut client = common::h2::connect(s.gateway.addr).await;
    let mut request = http::Request::get(format!("http://{}/rest", s.gateway.addr));
    for i in 0..120 {
        request = request.header(format!("x-h{i}"), "v");
    }
    let (answer, _) = client
        .send_request(request.body(()).expect("request"), true)
        .expect("sent");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer in time")
        .expect("an answer");
    assert_eq!(answer.status(), 431);
    let mut body = answer.into_body();
    let mut text = Vec::new();
    while let Some(piece) = body.data().await {
        text.extend_from_slice(&piece.expect("the answer body"));
    }
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("more than 100 header fields"), "{text}");
    // HTTP/1.0 may leave Host out.
    let reply = s.raw(b"GET /rest HTTP/1.0\r\n\r\n").await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert_eq!(s.upstream.total(), 1);
    s.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_keys() {
    let s = setup("bad-keys").await;
    let long = format!("Idempotency-Key: {}\r\n", "k".repeat(256));
    let long_quoted = format!("Idempotency-Key: \"{}\"\r\n", "k".repeat(300));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("control char", b"Idempotency-Key: a\x01b\r\n".to_vec()),
        ("DEL", b"Idempotency-Key: a\x7fb\r\n".to_vec()),
        ("tab inside", b"Idempotency-Key: a\tb\r\n".to_vec()),
        ("obs-text", b"Idempotency-Key: cl\xe9\r\n".to_vec()),
        ("UTF-8", "Idempotency-Key: ключ\r\n".as_bytes().to_vec()),
        (
            "quoted obs-text",
            b"Idempotency-Key: \"a\xffb\"\r\n".to_vec(),
        ),
        ("256 bytes", long.into_bytes()),
        ("300 bytes quoted", long_quoted.into_bytes()),
        ("empty quoted", b"Idempotency-Key: \"\"\r\n".to_vec()),
        ("empty", b"Idempotency-Key: \r\n".to_vec()),
        ("only spaces", b"Idempotency-Key:    \r\n".to_vec()),
        ("space inside", b"Idempotency-Key: a b\r\n".to_vec()),
        ("unterminated", b"Idempotency-Key: \"abc\r\n".to_vec()),
        // A quoted space and parameters are valid RFC 8941 (tests/keys_and_fingerprints.rs).
        (
            "bad parameter",
            b"Idempotency-Key: \"abc\";P=1\r\n".to_vec(),
        ),
        ("bad escape", b"Idempotency-Key: \"a\\nb\"\r\n".to_vec()),
        (
            "two lines",
            b"Idempotency-Key: twice-a\r\nIdempotency-Key: twice-b\r\n".to_vec(),
        ),
        (
            "comma list",
            b"Idempotency-Key: list-a, list-b\r\n".to_vec(),
        ),
    ];
    for (case, key_line) in &cases {
        let reply = s.raw(&keyed(key_line, b"")).await;
        assert_eq!(reply.status, Some(400), "{case}: {reply:?}");
        // Control characters too (docs/behaviour.md), though RFC 9110 lets no field
        // value hold them: the head is read without the field, and the
        // gateway, knowing it is the route's key, says so.
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("invalid-key"),
            "{case}: {reply:?}"
        );
        // The answer never echoes the key.
        assert!(!reply.text.contains("kkkkkkkk"), "{case}: {reply:?}");
    }
    // Control characters in another field: a plain 400, on a keyed route
    // and on a pass-through one; NUL anywhere stays a malformed head.
    for (case, request) in [
        (
            "other field",
            keyed(b"Idempotency-Key: fine\r\nX-Note: a\x01b\r\n", b""),
        ),
        (
            "pass-through",
            b"POST /rest HTTP/1.1\r\nHost: gw\r\nX-Note: a\x7fb\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
        ("NUL in the key", keyed(b"Idempotency-Key: a\x00b\r\n", b"")),
    ] {
        let reply = s.raw(&request).await;
        assert_eq!(reply.status, Some(400), "{case}: {reply:?}");
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("bad-request"),
            "{case}: {reply:?}"
        );
    }
    s.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn json_pointer_route_bad_bodies() {
    let s = setup("bad-json").await;
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("invalid UTF-8", b"{\"id\":\"\xff\xfe\"}".to_vec()),
        ("invalid UTF-8 outside", b"\xff{\"id\":\"k1\"}".to_vec()),
        ("not JSON", b"id=k1".to_vec()),
        ("truncated JSON", b"{\"id\":\"k1\"".to_vec()),
        ("trailing garbage", b"{\"id\":\"k1\"} x".to_vec()),
        ("no id", b"{\"other\":1}".to_vec()),
        ("null id", b"{\"id\":null}".to_vec()),
        ("object id", b"{\"id\":{\"a\":1}}".to_vec()),
        ("empty body", Vec::new()),
        (
            "deep nesting",
            [b"[".repeat(400), b"]".repeat(400)].concat(),
        ),
    ];
    for (case, body) in &bodies {
        let mut request = format!(
            "POST /hook HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        let reply = s.raw(&request).await;
        assert_eq!(reply.status, Some(400), "{case}: {reply:?}");
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("missing-key"),
            "{case}"
        );
    }
    s.assert_clean();
}

/// Writes `head`, then `body` in `chunk`-byte pieces `every` apart.
async fn trickle(
    addr: std::net::SocketAddr,
    head: &[u8],
    body: &[u8],
    chunk: usize,
    every: Duration,
) -> RawReply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(head).await;
    for piece in body.chunks(chunk) {
        if stream.write_all(piece).await.is_err() {
            break;
        }
        tokio::time::sleep(every).await;
    }
    raw::read_reply(&mut stream, WITHIN).await
}

#[tokio::test(flavor = "multi_thread")]
async fn keyed_bodies_over_the_limit_and_lying_lengths() {
    let s = setup("bad-bodies").await;
    let addr = s.gateway.addr;

    // Declared over the limit: refused from the head, before the body.
    let reply = trickle(
        addr,
        b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: big1\r\nContent-Length: 4096\r\n\r\n",
        &[b'x'; 4096],
        256,
        Duration::from_millis(10),
    )
    .await;
    assert!(reply.is_refusal(), "{reply:?}");
    if reply.status.is_some() {
        assert_eq!(reply.status, Some(413), "{reply:?}");
        assert_eq!(problem_code(&reply).as_deref(), Some("body-too-large"));
    }

    // Chunked, no length, trickled past the limit: refused once it passes.
    let mut chunked = Vec::new();
    for _ in 0..20 {
        chunked.extend_from_slice(b"64\r\n");
        chunked.extend_from_slice(&[b'y'; 100]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let reply = trickle(
        addr,
        b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: big2\r\nTransfer-Encoding: chunked\r\n\r\n",
        &chunked,
        50,
        Duration::from_millis(10),
    )
    .await;
    assert!(reply.is_refusal(), "{reply:?}");
    if reply.status.is_some() {
        assert_eq!(reply.status, Some(413), "{reply:?}");
    }

    // A length the body never reaches, then the client closes its side.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: short1\r\nContent-Length: 100\r\n\r\n{\"a\":1}")
        .await
        .expect("write");
    stream.shutdown().await.expect("shutdown");
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_refused("shorter body then close", &reply);

    // The same on the JSON-pointer route, where the key is in the body.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            b"POST /hook HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"id\":\"short2\"}",
        )
        .await
        .expect("write");
    stream.shutdown().await.expect("shutdown");
    assert_refused(
        "shorter JSON body then close",
        &raw::read_reply(&mut stream, WITHIN).await,
    );

    // A length shorter than the body on the JSON route: the body is what
    // Content-Length says (`{"id"`), not JSON, so no key; the bytes after it
    // are the connection's next request (garbage here), refused too.
    let reply = s
        .raw(b"POST /hook HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\n{\"id\":\"long1\",\"x\":1}")
        .await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert_eq!(
        problem_code(&reply).as_deref(),
        Some("missing-key"),
        "{reply:?}"
    );
    s.assert_clean();

    // On a header-key route the first Content-Length bytes are a complete
    // request and are forwarded — exactly those bytes, never the rest.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: long2\r\nContent-Length: 7\r\n\r\n{\"a\":1}EXTRA GARBAGE NOT HTTP\r\n\r\n")
        .await
        .expect("write");
    let first = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(first.status, Some(201), "{first:?}");
    let doc: serde_json::Value = serde_json::from_str(first.body()).expect("JSON answer");
    assert_eq!(doc["body_len"], 7, "{doc}");
    let second = raw::read_reply(&mut stream, WITHIN).await;
    assert_refused("bytes past Content-Length", &second);
    assert_eq!(s.upstream.total(), 1);
    assert_eq!(s.upstream.executions("long2"), 1);
    s.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread")]
async fn slowloris_head_is_cut_off() {
    let s = setup("slowloris").await;
    let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
    let started = Instant::now();
    stream
        .write_all(b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\n")
        .await
        .expect("write");
    // One header byte every 200 ms: the head never completes within 1 s.
    let line = b"Idempotency-Key: slow-and-steady-wins-nothing\r\n";
    let mut closed = false;
    for &byte in line.iter().cycle().take(200) {
        if stream.write_all(&[byte]).await.is_err() {
            closed = true;
            break;
        }
        if raw::wait_closed(&mut stream, Duration::from_millis(200)).await {
            closed = true;
            break;
        }
        if started.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "a trickled head was not cut off within {took:?}");
    // header_read_timeout is 1s; allow a loaded machine plenty of slack.
    assert!(took < Duration::from_secs(8), "cut off only after {took:?}");
    s.assert_clean();
}

/// A keyed request whose body stops arriving (the head's timeout is behind
/// it) gets a 408 problem after `header_read_timeout` without more data,
/// and its connection is closed: on a keyed or JSON-pointer route the
/// gateway reads the body before anything else, and nothing else bounds it.
#[tokio::test(flavor = "multi_thread")]
async fn slowloris_body_on_keyed_routes_is_cut_off() {
    let s = setup("slow-body").await;
    for head in [
        "POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: stalled\r\n",
        "POST /hook HTTP/1.1\r\nHost: gw\r\n",
    ] {
        let request = format!("{head}Content-Length: 1000\r\n\r\n{{\"id\": \"x");
        s.assert_stalled_body_cut_off(&request).await;
    }
    s.assert_clean();
}

/// A pass-through request that declares a small body (up to 16 KiB: read
/// whole before it is forwarded, docs/design.md) and stops sending it gets
/// the same 408 after `header_read_timeout`, over HTTP/1 (connection
/// closed) and HTTP/2, and nothing reaches the upstream. No other timer
/// covers that read: the upstream's `timeout` starts once the request is
/// handed over, so such a request held its connection for as long as the
/// client kept it open.
#[tokio::test(flavor = "multi_thread")]
async fn slowloris_small_body_on_a_pass_through_is_cut_off() {
    let s = setup("slow-small-body").await;
    for (length, sent) in [("1000", "{\"id\": \"x"), ("5", "")] {
        let request =
            format!("POST /rest HTTP/1.1\r\nHost: gw\r\nContent-Length: {length}\r\n\r\n{sent}");
        s.assert_stalled_body_cut_off(&request).await;
    }
    let mut client = common::h2::connect(s.gateway.addr).await;
    let request = http::Request::post(format!("http://{}/rest", s.gateway.addr))
        .header("content-length", "5")
        .body(())
        .expect("request");
    let started = Instant::now();
    let (answer, mut body) = client.send_request(request, false).expect("sent");
    body.send_data(bytes::Bytes::from_static(b"ab"), false)
        .expect("the first piece");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer in time")
        .expect("an answer");
    let took = started.elapsed();
    assert_eq!(answer.status(), 408);
    assert!(
        took >= Duration::from_millis(900),
        "answered after {took:?}"
    );
    s.assert_clean();
}

/// A body the gateway reads whole that keeps coming, a byte every 0.3 s
/// (never quiet for `header_read_timeout`, 1 s here), gets 408 once
/// `body_read_timeout` (2 s here) has passed since its head: on a keyed
/// route, a route with its key in the body, and a pass-through's small
/// body. Such a client held its connection, and what it had sent of the
/// body budget, for as long as it went on. Nothing is forwarded, and the
/// bytes it held are given back.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_trickled_past_body_read_timeout_is_cut_off() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("trickled-body");
    let config = config().server("body_read_timeout", "2s");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    for head in [
        "POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: trickled\r\n",
        "POST /hook HTTP/1.1\r\nHost: gw\r\n",
        "POST /rest HTTP/1.1\r\nHost: gw\r\n",
    ] {
        let std_stream = std::net::TcpStream::connect(gateway.addr).expect("connect");
        std_stream.set_nonblocking(true).expect("nonblocking");
        let mut writer =
            TcpStream::from_std(std_stream.try_clone().expect("clone")).expect("tokio stream");
        let mut reader = TcpStream::from_std(std_stream).expect("tokio stream");
        let started = Instant::now();
        writer
            .write_all(format!("{head}Content-Length: 1000\r\n\r\n{{\"id\": \"x").as_bytes())
            .await
            .expect("head");
        let trickle = tokio::spawn(async move {
            for _ in 0..40 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                if writer.write_all(b"x").await.is_err() {
                    break;
                }
            }
        });
        let reply = raw::read_reply(&mut reader, WITHIN).await;
        let took = started.elapsed();
        trickle.abort();
        assert_eq!(reply.status, Some(408), "{head}: {reply:?}");
        let doc: serde_json::Value = serde_json::from_str(reply.body()).expect("problem+json");
        assert_eq!(doc["code"], "request-timeout", "{doc}");
        assert!(
            doc["detail"]
                .as_str()
                .is_some_and(|d| d.contains("within 2 s")),
            "{doc}"
        );
        assert!(
            took >= Duration::from_millis(1900),
            "{head}: after {took:?}"
        );
        assert!(took < Duration::from_secs(8), "{head}: after {took:?}");
    }
    // Over HTTP/2 alike, on a keyed route.
    let mut client = common::h2::connect(gateway.addr).await;
    let request = http::Request::post(format!("http://{}/v1/charges", gateway.addr))
        .header("idempotency-key", "trickled-h2")
        .header("content-length", "1000")
        .body(())
        .expect("request");
    let started = Instant::now();
    let (answer, mut body) = client.send_request(request, false).expect("sent");
    let trickle = tokio::spawn(async move {
        for _ in 0..40 {
            if body
                .send_data(bytes::Bytes::from_static(b"x"), false)
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer in time")
        .expect("an answer");
    let took = started.elapsed();
    trickle.abort();
    assert_eq!(answer.status(), 408);
    assert!(
        took >= Duration::from_millis(1900),
        "HTTP/2: after {took:?}"
    );
    assert_eq!(upstream.total(), 0, "a trickled body was forwarded");
    let metrics = gateway.admin_client().get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_buffered_body_bytes 0\n"),
        "bytes still held:\n{metrics}"
    );
    assert!(!gateway.log_text().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_are_bounded() {
    let s = setup("idle").await;
    // Warm up, so the baseline includes the runtime's steady state.
    let reply = s
        .gateway
        .client()
        .post("/v1/charges", Some("warm"), "{}")
        .await;
    assert_eq!(reply.status, 201);
    let before = s.gateway.memory_kib("VmRSS");

    // 300 idle connections against max_connections = 50: each past the 50th
    // takes the place of the one idle longest (tests/connection_cap.rs),
    // and the last 50 are cut off by header_read_timeout.
    let mut idle = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect(s.gateway.addr).await {
            Ok(stream) => idle.push(stream),
            Err(_) => break,
        }
    }
    assert!(idle.len() >= 100, "only {} connections opened", idle.len());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during = s.gateway.memory_kib("VmRSS");

    // The gateway still serves: the request takes an idle connection's place.
    let client = s.gateway.client();
    let served = tokio::time::timeout(
        Duration::from_secs(40),
        client.post("/v1/charges", Some("after-idle"), "{}"),
    )
    .await;
    let reply = served.expect("the gateway did not serve behind idle connections");
    assert_eq!(reply.status, 201);
    assert_eq!(s.upstream.executions("after-idle"), 1);

    let growth = during.saturating_sub(before);
    assert!(
        growth < 64 * 1024,
        "300 idle connections grew the gateway by {growth} KiB ({before} → {during})"
    );
    drop(idle);
    s.assert_no_panic();
}

/// A client that asks for a large answer and never reads it is cut off
/// once its connection took nothing for `header_read_timeout` (1 s here),
/// rather than holding its slot (and the upstream's stream) for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_its_answer_is_cut_off() {
    let s = setup("never-reads").await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    // A small receive window, so the answer backs up into the gateway.
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stream = socket.connect(s.gateway.addr).await.expect("connect");
    stream
        .write_all(b"GET /big?bytes=200000000 HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Now read: what the kernel holds, then the end (or a reset), well
    // short of 200 MB.
    let mut total = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let ended = tokio::time::timeout(WITHIN, async {
        loop {
            match tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "still streaming after {total} bytes");
    assert!(total < 100_000_000, "{total} bytes");
    s.assert_no_panic();
}

/// A pass-through body whose chunked framing breaks mid-way: 400, and the
/// answer says the connection closes, as it does.
#[tokio::test(flavor = "multi_thread")]
async fn broken_pass_through_body_closes_the_connection() {
    let s = setup("broken-body").await;
    for (case, request) in [
        (
            "bad chunk size",
            &b"POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n"[..],
        ),
        (
            "chunk data without its CRLF",
            b"POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
        ),
    ] {
        let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
        stream.write_all(request).await.expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(400), "{case}: {reply:?}");
        assert_eq!(problem_code(&reply).as_deref(), Some("bad-request"), "{case}");
        assert_eq!(
            reply.header("connection").as_deref(),
            Some("close"),
            "{case}: {reply:?}"
        );
        assert!(
            reply.closed || raw::wait_closed(&mut stream, WITHIN).await,
            "{case}: connection left open"
        );
    }
    s.assert_no_panic();
}

/// HTTP/2 connections that each made a request and then stay open without
/// another are closed after `header_read_timeout` of idleness, as idle
/// HTTP/1 keep-alive connections are: `max_connections` of them used to
/// hold every slot for good, and the listener served no one else.
#[tokio::test(flavor = "multi_thread")]
async fn idle_http2_connections_give_their_slots_back() {
    let s = setup("h2-idle").await;
    let mut idle = Vec::new();
    for n in 0..50 {
        let tcp = TcpStream::connect(s.gateway.addr).await.expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("handshake");
        let connection = tokio::spawn(connection);
        let mut client = client.ready().await.expect("ready");
        let request = http::Request::get(format!("http://{}/pass/{n}", s.gateway.addr))
            .body(())
            .expect("request");
        let (answer, _) = client.send_request(request, true).expect("sent");
        let answer = tokio::time::timeout(WITHIN, answer)
            .await
            .expect("an answer in time")
            .expect("an answer");
        assert!(answer.status().is_success(), "{:?}", answer.status());
        idle.push((client, connection));
    }
    // All 50 slots are taken by idle HTTP/2 connections; an HTTP/1 request
    // takes the place of one of them.
    let reply = s.raw(b"GET /pass/after HTTP/1.1\r\nHost: gw\r\n\r\n").await;
    assert!(
        reply.status.is_some_and(|status| status < 300),
        "not served behind idle HTTP/2 connections: {reply:?}"
    );
    for (_, connection) in idle {
        let ended = tokio::time::timeout(WITHIN, connection).await;
        assert!(ended.is_ok(), "an idle HTTP/2 connection was left open");
    }
    s.assert_no_panic();
}

/// An HTTP/2 client that keeps its stream's flow-control window shut, so
/// none of its answer can be sent, is cut off once it took nothing for
/// `header_read_timeout`, as an HTTP/1 client that reads nothing is: it
/// held its connection slot and the upstream's stream for good.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_client_that_never_opens_its_window_is_cut_off() {
    let s = setup("h2-window-shut").await;
    let tcp = TcpStream::connect(s.gateway.addr).await.expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("handshake");
    let connection = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let request = http::Request::get(format!("http://{}/big?bytes=200000", s.gateway.addr))
        .body(())
        .expect("request");
    let (answer, _) = client.send_request(request, true).expect("sent");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("a head in time")
        .expect("a head");
    assert!(answer.status().is_success(), "{:?}", answer.status());
    let ended = tokio::time::timeout(WITHIN, connection).await;
    assert!(
        ended.is_ok(),
        "a connection whose answer cannot move was left open"
    );
    drop(answer);
    s.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread")]
async fn request_smuggling_attempts() {
    let s = setup("smuggling").await;
    // The request hidden behind each ambiguous one carries this key, so the
    // upstream's per-key count shows whether it ever got through.
    const HIDDEN: &str = "GET /smuggled HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: smuggled\r\n\r\n";
    let refused: Vec<(&str, String)> = vec![
        (
            // Forwarded re-framed, the body would lose its gzip coding.
            "a coding before chunked",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "chunked twice",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            format!(
                "POST /pass HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "TE not chunked-final",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "TE gzip only",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "TE with space before colon",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "duplicate differing Content-Length",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nContent-Length: {}\r\n\r\n{HIDDEN}",
                HIDDEN.len()
            ),
        ),
        (
            "Content-Length list",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: 0, {}\r\n\r\n{HIDDEN}",
                HIDDEN.len()
            ),
        ),
        (
            "signed Content-Length",
            format!("POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: +0\r\n\r\n{HIDDEN}"),
        ),
        (
            "hex Content-Length",
            format!("POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: 0x0\r\n\r\n{HIDDEN}"),
        ),
        (
            "obs-fold Transfer-Encoding",
            format!(
                "POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
            ),
        ),
        (
            "bad chunk size on a keyed route",
            format!(
                "POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: chunk\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{HIDDEN}"
            ),
        ),
    ];
    for (case, bytes) in &refused {
        let reply = s.raw(bytes.as_bytes()).await;
        // RFC 9112 §6.1: an unknown transfer coding may get 501 instead.
        assert!(
            reply.is_refusal() || reply.status == Some(501),
            "{case}: expected a refusal, got {reply:?}"
        );
        assert!(
            reply.status.is_none() || reply.closed || !reply.text.contains("smuggled"),
            "{case}: {reply:?}"
        );
    }
    assert_eq!(s.upstream.total(), 0, "an ambiguous request was forwarded");

    // Both Content-Length and Transfer-Encoding: refused with 400 and the
    // connection closed (README, "Request framing"). Should it ever be
    // forwarded instead, it must be unambiguous: chunked framing, no
    // Content-Length, and the hidden request never follows.
    let both = format!(
        "POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{HIDDEN}",
        5 + HIDDEN.len()
    );
    let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
    stream.write_all(both.as_bytes()).await.expect("write");
    let first = raw::read_reply(&mut stream, WITHIN).await;
    assert!(
        first.is_refusal() || first.status.is_some_and(|st| st < 300),
        "{first:?}"
    );
    if first.status.is_some_and(|st| st < 300) {
        assert_eq!(
            s.upstream.last_header("content-length"),
            None,
            "forwarded with both framings"
        );
        assert!(
            raw::wait_closed(&mut stream, WITHIN).await,
            "the connection stayed open after a CL+TE request"
        );
    }
    assert!(s.upstream.total() <= 1);
    assert_eq!(
        s.upstream.executions("smuggled"),
        0,
        "the hidden request ran"
    );
    s.assert_no_panic();
}

/// An HTTP/2 request answered before its body is in (413 on the declared
/// length, 400 without a key): the stream is not reset under the answer
/// while the client is still sending. hyper's client keeps such an answer
/// either way; curl 7.88 lost it in every try (exit 92), so this speaks
/// HTTP/2 with the `h2` crate and looks for the reset itself.
#[tokio::test(flavor = "multi_thread")]
async fn http2_early_answers_are_not_reset_under_the_client() {
    let s = setup("h2-early").await;
    for (key, declared, status) in [
        (Some("k-big"), 3 * 1024 * 1024, 413),
        (None, 64 * 1024, 400),
    ] {
        let mut client = common::h2::connect(s.gateway.addr).await;
        let mut request = http::Request::post(format!("http://{}/v1/charges", s.gateway.addr))
            .header("content-length", declared.to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let request = request.body(()).expect("request");
        let (answer, mut upload) = client.send_request(request, false).expect("sent");
        upload
            .send_data(bytes::Bytes::from(vec![b'x'; 16 * 1024]), false)
            .expect("first piece");
        let answer = tokio::time::timeout(WITHIN, answer)
            .await
            .expect("an answer in time")
            .expect("an answer, not a reset");
        assert_eq!(answer.status(), status, "{key:?}");
        let (_, mut body) = answer.into_parts();
        let mut text = Vec::new();
        while let Some(piece) = body.data().await {
            text.extend_from_slice(&piece.expect("the answer body whole"));
        }
        assert!(
            String::from_utf8_lossy(&text).contains("\"status\":"),
            "{key:?}: a problem document"
        );
        // The client goes on sending, and the stream stays open for it.
        // Without the linger the reset comes right behind the answer; the
        // window is short so that a slow machine stays inside the 0.5 s.
        let reset = tokio::time::timeout(
            Duration::from_millis(50),
            std::future::poll_fn(|cx| upload.poll_reset(cx)),
        )
        .await;
        assert!(reset.is_err(), "{key:?}: the stream was reset: {reset:?}");
        upload
            .send_data(bytes::Bytes::from(vec![b'x'; 16 * 1024]), false)
            .expect("more of the body");
    }
    s.assert_clean();
}

/// Dot segments cannot lead around a route: `/public/../v1/charges` is the
/// charges route (a key required), and the upstream is sent the path the
/// gateway matched, resolved.
#[tokio::test(flavor = "multi_thread")]
async fn dot_segments_are_resolved_before_routing() {
    let s = setup("dot-segments").await;
    for target in [
        "/public/../v1/charges",
        "/x/%2e%2E/v1/charges",
        "/v1/./charges/../charges",
    ] {
        let request = format!(
            "POST {target} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        let reply = s.raw(request.as_bytes()).await;
        assert_eq!(reply.status, Some(400), "{target}: {}", reply.text);
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("missing-key"),
            "{target}"
        );
    }
    s.assert_clean();

    let reply = s
        .raw(b"GET /things/./1/../2?q=1 HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(reply.status, Some(201), "{}", reply.text);
    let seen: serde_json::Value = serde_json::from_str(reply.body()).expect("the upstream's JSON");
    assert_eq!(seen["path"], "/things/2", "{seen}");
    assert_eq!(seen["query"], "q=1", "{seen}");
}

/// Field names that fold to a framing field for a peer that reads `_` as
/// `-` (and runs of separators as one) would give that peer a second
/// framing: refused with 400, as are names that are not tokens. Other
/// underscore names pass (docs/http1.md).
#[tokio::test(flavor = "multi_thread")]
async fn framing_look_alikes_and_non_token_names_are_refused() {
    let s = setup("look-alikes").await;
    const HIDDEN: &str = "GET /smuggled HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: smuggled\r\n\r\n";
    for name in [
        "Transfer_Encoding",
        "transfer_encoding",
        "Transfer---Encoding",
        "Transfer___Encoding",
        "TRANSFER-_ENCODING",
    ] {
        let request = format!(
            "POST /pass HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n{name}: chunked\r\n\r\n0\r\n\r\n{HIDDEN}"
        );
        let reply = s.raw(request.as_bytes()).await;
        assert_eq!(reply.status, Some(400), "{name}: {reply:?}");
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("bad-request"),
            "{name}"
        );
    }
    for name in ["Content_Length", "content__length", "Content-_-Length"] {
        let request = format!(
            "POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n{name}: 0\r\n\r\n0\r\n\r\n{HIDDEN}"
        );
        let reply = s.raw(request.as_bytes()).await;
        assert_eq!(reply.status, Some(400), "{name}: {reply:?}");
    }
    for name in [
        "X(Y)", "X{Y}", "X\"Y", "X/Y", "X@Y", "X[Y]", "X\x7fY", "X\u{e9}Y",
    ] {
        let request = format!("GET /pass HTTP/1.1\r\nHost: gw\r\n{name}: 1\r\n\r\n");
        let reply = s.raw(request.as_bytes()).await;
        assert_eq!(reply.status, Some(400), "{name:?}: {reply:?}");
    }
    s.assert_clean();
    // Other underscore names reach the upstream as they came.
    let reply = s
        .raw(b"GET /pass HTTP/1.1\r\nHost: gw\r\nX_Api_Key: k1\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert_eq!(s.upstream.last_header("x_api_key").as_deref(), Some("k1"));
    assert_eq!(s.upstream.executions("smuggled"), 0);
    s.assert_no_panic();
}

/// Chunk-size lines outside RFC 9112 §7.1.1's grammar: a lenient reader in
/// front of the gateway would frame the body another way. Each is refused
/// and nothing behind it is read as a request.
#[tokio::test(flavor = "multi_thread")]
async fn chunk_lines_outside_the_grammar_are_refused() {
    let s = setup("chunk-grammar").await;
    const HIDDEN: &str = "GET /smuggled HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: smuggled\r\n\r\n";
    let long_ext = format!(";n={}", "v".repeat(2000));
    let mut many_exts = String::new();
    for _ in 0..10 {
        many_exts.push_str(&format!("1{long_ext}\r\nx\r\n"));
    }
    for (case, body) in [
        ("space after size", "5 \r\nhello\r\n0\r\n\r\n".to_string()),
        ("lone semicolon", "5;\r\nhello\r\n0\r\n\r\n".into()),
        (
            "bare CR in extension",
            "5;a\rb\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("NUL in extension", "5;a\0\r\nhello\r\n0\r\n\r\n".into()),
        (
            "invalid extension name",
            "5;a b\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("open quoted value", "5;a=\"x\r\nhello\r\n0\r\n\r\n".into()),
        (
            "size past 2^64",
            "1ffffffffffffffff\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("extensions past 16 KiB", format!("{many_exts}0\r\n\r\n")),
        (
            "trailer without colon",
            "0\r\nbroken trailer\r\n\r\n".into(),
        ),
    ] {
        for path in ["/pass", "/v1/charges"] {
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: chunk-{}\r\nTransfer-Encoding: chunked\r\n\r\n{body}{HIDDEN}",
                case.len()
            );
            let reply = s.raw(request.as_bytes()).await;
            assert!(
                reply.status.is_none_or(|status| status >= 400),
                "{case} on {path}: {reply:?}"
            );
            assert!(!reply.text.contains("smuggled"), "{case}: {reply:?}");
        }
    }
    assert_eq!(s.upstream.executions("smuggled"), 0, "a hidden request ran");
    // The grammar's own forms pass: BWS before `;` and around `=`, a
    // quoted value, a trailer.
    let reply = s
        .raw(b"POST /pass HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5 ; a = \"q\\\"\" ;b\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n")
        .await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    s.assert_no_panic();
}

/// Request lines RFC 9110/9112 decide (docs/http1.md): `*` is only for
/// OPTIONS, which the gateway answers itself; a higher HTTP/1 minor version
/// is read as 1.1; an over-long method and raw non-ASCII target bytes are
/// malformed (400), never a size problem (431) and never forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn request_lines_decided_by_the_rfcs() {
    let s = setup("request-lines").await;
    for method in ["GET", "POST", "DELETE"] {
        let reply = s
            .raw(format!("{method} * HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n").as_bytes())
            .await;
        assert_eq!(reply.status, Some(400), "{method} *: {reply:?}");
        assert_eq!(problem_code(&reply).as_deref(), Some("bad-request"));
    }
    // The authority form (`host:port`) is only for CONNECT (RFC 9112
    // §3.2.3), which is not proxied either: a malformed request, not a
    // path no route has.
    for method in ["GET", "POST", "OPTIONS"] {
        let reply = s
            .raw(
                format!("{method} gw:80 HTTP/1.1\r\nHost: gw:80\r\nContent-Length: 0\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        assert_eq!(reply.status, Some(400), "{method} gw:80: {reply:?}");
        assert_eq!(problem_code(&reply).as_deref(), Some("bad-request"));
    }
    let long = format!("{} /pass HTTP/1.1\r\nHost: gw\r\n\r\n", "M".repeat(2000));
    let reply = s.raw(long.as_bytes()).await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    let reply = s
        .raw(b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    let reply = s.raw(b"GET /\x80 HTTP/1.1\r\nHost: gw\r\n\r\n").await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    s.assert_clean();

    // OPTIONS * twice on one connection: the gateway's own 200, no body,
    // the connection kept, nothing forwarded.
    let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
    for _ in 0..2 {
        stream
            .write_all(b"OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .expect("write");
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(200), "{reply:?}");
        assert_eq!(reply.header("content-length").as_deref(), Some("0"));
        assert!(!reply.closed, "{reply:?}");
    }
    assert_eq!(s.upstream.total(), 0, "OPTIONS * was forwarded");

    // HTTP/1.2 is HTTP/1.1 to the gateway: forwarded, answered in 1.1.
    let reply = s
        .raw(b"GET /pass HTTP/1.2\r\nHost: gw\r\nConnection: close\r\n\r\n")
        .await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert!(reply.text.starts_with("HTTP/1.1 "), "{reply:?}");
    assert_eq!(s.upstream.total(), 1);
    // HTTP/2.0 or 3.x in an HTTP/1 request line is not.
    let reply = s.raw(b"GET /pass HTTP/2.0\r\nHost: gw\r\n\r\n").await;
    assert_eq!(reply.status, Some(400), "{reply:?}");
    assert_eq!(s.upstream.total(), 1);
    s.assert_no_panic();
}

/// RFC 9113 §8.3.1: over HTTP/2 a `host` field naming another host than
/// `:authority` is a malformed request: 400, nothing forwarded. The same
/// host in another case, or no `host` field, is served.
/// A method with lower-case letters (`post`, `head`, `connect`) is refused
/// on both protocols, nothing forwarded. Methods are case-sensitive (RFC 9110
/// §9.1), so `post` would be no `POST` to the routes' `methods`: it would pass
/// a route that requires a key, to an upstream that upper-cases methods
/// (Django, Flask) and runs it as a POST; `head` would be answered as HEAD
/// while the gateway waited for a body.
#[tokio::test(flavor = "multi_thread")]
async fn lower_case_methods_are_refused() {
    let s = setup("lower-case-methods").await;
    for line in [
        "post /v1/charges",
        "Post /v1/charges",
        "head /pass",
        "connect /pass",
        "get /pass",
    ] {
        let reply = s
            .raw(format!("{line} HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes())
            .await;
        assert_eq!(reply.status, Some(400), "{line}: {reply:?}");
        assert_eq!(
            problem_code(&reply).as_deref(),
            Some("bad-request"),
            "{line}"
        );
    }
    s.assert_clean();

    let mut client = common::h2::connect(s.gateway.addr).await;
    for (method, status) in [("post", 400), ("POST", 400), ("get", 400), ("GET", 201)] {
        // POST without a key is the route's own 400 (missing-key).
        let request = http::Request::builder()
            .method(method)
            .uri("http://gw.example/v1/charges")
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), status, "{method}");
    }
    assert_eq!(s.upstream.total(), 1, "a lower-case method was forwarded");
    s.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http2_host_field_that_contradicts_the_authority_is_refused() {
    let s = setup("h2-host-authority").await;
    let mut client = common::h2::connect(s.gateway.addr).await;
    for (host, status) in [
        (Some("other.example"), 400),
        (Some("gw.example:1"), 400),
        (Some("GW.Example"), 201),
        (None, 201),
    ] {
        let mut request = http::Request::get("http://gw.example/rest");
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let answer = common::h2::send(&mut client, request.body(()).expect("request")).await;
        assert_eq!(answer.status(), status, "host {host:?}");
    }
    assert_eq!(s.upstream.total(), 2, "a contradicted host was forwarded");
    s.assert_no_panic();
}

/// RFC 9113 §8.2.1: an HTTP/2 field value that starts or ends with a space
/// or a tab makes the request malformed (HTTP/1 trims that whitespace as
/// optional; HTTP/2 has none to trim). It is refused 400 `bad-request`, as
/// other malformed HTTP/2 heads are, and never forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_field_value_with_edge_whitespace_is_refused() {
    let s = setup("h2-edge-whitespace").await;
    let mut client = common::h2::connect(s.gateway.addr).await;
    for (path, name, value, status) in [
        ("/rest", "x-a", " v", 400),
        ("/rest", "x-a", "v\t", 400),
        ("/rest", "x-a", "\tv ", 400),
        ("/v1/charges", "idempotency-key", "k1 ", 400),
        ("/rest", "x-a", "v w", 201),
        ("/rest", "x-a", "", 201),
    ] {
        let request = http::Request::get(format!("http://gw.example{path}"))
            .header(name, http::HeaderValue::from_str(value).expect("a value"))
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), status, "{name}: {value:?}");
        if status == 400 {
            assert_eq!(
                answer.headers()["content-type"],
                "application/problem+json",
                "{value:?}"
            );
            let bytes = common::h2::body(answer).await;
            let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("problem+json");
            assert_eq!(doc["code"], "bad-request", "{value:?}");
        }
    }
    assert_eq!(s.upstream.total(), 2, "a malformed request was forwarded");
    s.assert_no_panic();
}

/// A target is ASCII (RFC 3986): raw UTF-8 bytes in an HTTP/2 `:path`
/// (which the HTTP/2 layer lets through) are refused 400 `bad-request`, as
/// over HTTP/1 (docs/http1.md), never matched to a route nor sent to the
/// upstream raw; percent-encoded, they pass as sent.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_path_with_raw_non_ascii_bytes_is_refused() {
    let s = setup("h2-non-ascii-path").await;
    let mut client = common::h2::connect(s.gateway.addr).await;
    for (path, status) in [
        ("/rest/caf\u{e9}", 400),
        ("/v1/charges/\u{43a}", 400),
        ("/rest?q=\u{e9}", 400),
        ("/rest/caf%C3%A9", 201),
    ] {
        let request = http::Request::post(format!("http://gw.example{path}"))
            .header("idempotency-key", "k-non-ascii")
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), status, "{path}");
        if status == 400 {
            let bytes = common::h2::body(answer).await;
            let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("problem+json");
            assert_eq!(doc["code"], "bad-request", "{path}");
            assert_eq!(
                doc["detail"], "the request target has bytes that are not ASCII.",
                "{path}"
            );
        }
    }
    assert_eq!(
        s.upstream.total(),
        1,
        "a raw non-ASCII target was forwarded"
    );
    s.assert_no_panic();
}

/// Over HTTP/2 a head over `max_header_bytes` gets the gateway's own 431
/// problem document, and is counted, up to four times the limit (at least
/// 64 KiB): hyper's HTTP/2 layer refuses only heads past that, with a bare
/// 431 the gateway never sees (docs/behaviour.md).
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_head_well_over_the_limit_gets_the_problem_document() {
    let s = setup("h2-head-too-large").await;
    let counted = |text: &str| -> u64 {
        let prefix = "idemgate_requests_total{outcome=\"too_large\",route=\"\"} ";
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .map_or(0, |value| value.trim().parse().expect("a count"))
    };
    let mut client = common::h2::connect(s.gateway.addr).await;
    // 4 KiB limit: 5 KiB and 20 KiB are the gateway's to refuse; 100 KiB
    // is past hyper's bound.
    for (pad, problem) in [(5_000, true), (20_000, true), (100_000, false)] {
        let request = http::Request::get(format!("http://{}/rest", s.gateway.addr))
            .header("x-pad", "p".repeat(pad))
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), 431, "{pad}");
        let is_problem = answer
            .headers()
            .get("content-type")
            .is_some_and(|t| t == "application/problem+json");
        assert_eq!(is_problem, problem, "{pad}");
    }
    let text = s.gateway.admin_client().get("/metrics").await.text();
    assert_eq!(counted(&text), 2);
    s.assert_clean();
}

/// `OPTIONS *` asks about the server (RFC 9110 §9.3.7): over HTTP/2 as over
/// HTTP/1, the gateway's own 200 with no body, nothing forwarded; `*` with
/// another method is 400 `bad-request` on both.
#[tokio::test(flavor = "multi_thread")]
async fn options_asterisk_is_answered_alike_over_http2() {
    let s = setup("h2-options-asterisk").await;
    let mut client = common::h2::connect(s.gateway.addr).await;
    for (method, status) in [("OPTIONS", 200), ("OPTIONS", 200), ("GET", 400)] {
        let uri = http::Uri::from_parts({
            let mut parts = http::uri::Parts::default();
            parts.scheme = Some(http::uri::Scheme::HTTP);
            parts.authority = Some("gw.example".parse().expect("authority"));
            parts.path_and_query = Some("*".parse().expect("asterisk"));
            parts
        })
        .expect("an asterisk-form uri");
        let request = http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .expect("request");
        let answer = common::h2::send(&mut client, request).await;
        assert_eq!(answer.status(), status, "{method} *");
        let headers = answer.headers().clone();
        let bytes = common::h2::body(answer).await;
        if status == 200 {
            assert!(bytes.is_empty(), "{method} *");
            assert_eq!(headers.get("allow"), None);
        } else {
            let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("problem+json");
            assert_eq!(doc["code"], "bad-request", "{method} *");
        }
    }
    s.assert_clean();
}

/// Many large keyed bodies at once: the bodies every request holds are
/// bounded together (`max_buffered_bodies`). A body is held from its read
/// until it is written to the upstream: here A's waits for the upstream's
/// one connection, which a slow request holds. One past the room left is
/// refused 503 `gateway-overloaded` before anything is reserved or
/// forwarded, announced or chunked; room comes back once the body is sent
/// on, and the refused key then runs normally.
#[tokio::test(flavor = "multi_thread")]
async fn bodies_held_at_once_are_bounded_and_a_body_past_them_is_refused() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("body-budget");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "96KiB")
        .upstream(
            Upstream::api()
                .timeout("5s")
                .set("connect_timeout", "4s")
                .set("max_connections", 1),
        )
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    let admin = gateway.admin_client();
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(60 * 1024));
    let spawn_post = |path: &'static str, key: &'static str, body: String| {
        let client = client.clone();
        tokio::spawn(async move { client.post(path, Some(key), &body).await })
    };
    let inflight = |n: u32| {
        let admin = admin.clone();
        async move {
            let line = format!("idemgate_inflight{{route=\"charges\"}} {n}");
            let started = Instant::now();
            while !admin.get("/metrics").await.text().contains(&line) {
                assert!(started.elapsed() < WITHIN, "never {line}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };

    // The upstream's one connection, busy for 1.5 s; then A's 60 KiB,
    // read and held while A waits for that connection.
    let slow = spawn_post("/v1/charges?delay_ms=1500", "slow", "{}".into());
    inflight(1).await;
    let holder = spawn_post("/v1/charges", "a", big.clone());
    inflight(2).await;

    // B, announced: 60 KiB do not fit in the 36 left.
    let refused = client.post("/v1/charges", Some("b"), &big).await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "gateway-overloaded");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("idempotent-replayed"), None);
    let held = |metrics: &str| -> Option<String> {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("idemgate_buffered_body_bytes "))
            .map(str::to_owned)
    };
    let metrics = admin.get("/metrics").await.text();
    assert_eq!(held(&metrics).as_deref(), Some("61450"), "A's body alone");
    // C, chunked: refused once what arrived passes the room left.
    let mut chunked = String::from(
        "POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: c\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    for _ in 0..5 {
        chunked.push_str(&format!("2000\r\n{}\r\n", "y".repeat(0x2000)));
    }
    chunked.push_str("0\r\n\r\n");
    let reply = raw::exchange(gateway.addr, chunked.as_bytes(), WITHIN).await;
    assert_eq!(reply.status, Some(503), "{reply:?}");
    assert_eq!(problem_code(&reply).as_deref(), Some("gateway-overloaded"));
    // What fits is still taken beside A: the bound is on bytes, not requests.
    let small = format!("{{\"pad\":\"{}\"}}", "z".repeat(30 * 1024));
    let fits = spawn_post("/v1/charges", "d", small);
    inflight(3).await;

    assert_eq!(slow.await.expect("slow").status, 201);
    assert_eq!(holder.await.expect("A").status, 201);
    assert_eq!(fits.await.expect("D").status, 201);
    assert_eq!(upstream.executions("b") + upstream.executions("c"), 0);
    // A's body went on: B's retry runs, as a new key.
    let retried = client.post("/v1/charges", Some("b"), &big).await;
    assert_eq!(retried.status, 201, "{}", retried.text());
    assert_eq!(retried.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("b"), 1);

    let metrics = admin.get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_requests_total{outcome=\"overloaded\",route=\"charges\"} 2"),
        "{metrics}"
    );
    assert_eq!(
        held(&metrics).as_deref(),
        Some("0"),
        "every body given back"
    );
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// Answers held for clients that do not take them count against
/// `max_buffered_bodies` as request bodies do. Replays are taken while the
/// budget has room (the last one may pass it) and refused 503
/// `gateway-overloaded` once it is passed (nothing runs: the retry
/// replays); fresh answers are never refused (their request ran), and
/// while answers hold the budget past its bound a new key is refused
/// before anything is reserved. Without this, 400 HTTP/2 streams replaying
/// a 4 MB answer and taking none of it took the process to 1.5 GB. Each
/// replay here reads its own copy from the store (the answer is over what
/// the in-memory copies keep, and no two replays overlap): replays sharing
/// one copy count it once (tests/replay_memory.rs).
#[tokio::test(flavor = "multi_thread")]
async fn answers_not_taken_count_against_the_body_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("answer-budget");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "3MiB")
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    let held = || gateway.buffered_body_bytes();
    let given_back = |holders: Vec<tokio::task::JoinHandle<()>>, what: &'static str| {
        for holder in holders {
            holder.abort();
        }
        gateway.until_no_body_held(what)
    };
    // A 1.1 MB answer, stored (and read whole: nothing held once the
    // connection has let go of it, a moment after the client has it all).
    let path = "/v1/charges?pad=1100000";
    let first = client.post(path, Some("big"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    given_back(Vec::new(), "the first answer").await;

    // Replays of it, left unread: taken while the 3 MiB have room (the
    // third passes them), and refused once they are passed.
    let mut holders = Vec::new();
    for _ in 0..3 {
        let (held, status) = common::h2::unread(gateway.addr, "big", path).await;
        assert_eq!(status, 201);
        holders.push(held);
    }
    let holding = held().await;
    assert!(holding > 3 * 1024 * 1024, "{holding}");
    let refused = client.post(path, Some("big"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "gateway-overloaded");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        held().await < 3 * 1024 * 1024 + 1_100_200,
        "one answer past the bound at most"
    );
    given_back(std::mem::take(&mut holders), "the replays").await;
    let replayed = client.post(path, Some("big"), "{}").await;
    assert_eq!(replayed.status, 201, "{}", replayed.text());
    assert_eq!(upstream.executions("big"), 1);

    // Fresh answers, unread: never refused (they ran), they may pass the
    // bound; past it, a new key is refused and left free.
    for key in ["n1", "n2", "n3"] {
        let (held, status) = common::h2::unread(gateway.addr, key, path).await;
        assert_eq!(status, 201);
        holders.push(held);
    }
    let refused = client.post(path, Some("n4"), "{}").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "gateway-overloaded");
    assert_eq!(upstream.executions("n4"), 0);
    given_back(holders, "the answers").await;
    let retried = client.post(path, Some("n4"), "{}").await;
    assert_eq!(retried.status, 201, "{}", retried.text());
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A client that goes on sending a body answered early (413 on its
/// declared length) for longer than the gateway's 0.5 s of quiet still gets
/// its answer: the connection reads on while the body keeps coming (as
/// nginx's lingering close does), over HTTP/1 and HTTP/2, and is closed (or
/// the stream reset) only once the client goes quiet.
#[tokio::test(flavor = "multi_thread")]
async fn an_early_answer_reaches_a_client_that_keeps_sending_for_seconds() {
    let s = setup("linger-long").await;
    let piece = bytes::Bytes::from(vec![b'x'; 16 * 1024]);
    let sending = Duration::from_millis(2500);

    // HTTP/1: the client writes its body for 2.5 s before it reads.
    let mut stream = TcpStream::connect(s.gateway.addr).await.expect("connect");
    stream.write_all(UPLOAD_HEAD).await.expect("head");
    let started = Instant::now();
    while started.elapsed() < sending {
        stream
            .write_all(&piece)
            .await
            .expect("the body, still taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(reply.status, Some(413), "{reply:?}");
    assert_eq!(problem_code(&reply).as_deref(), Some("body-too-large"));

    // HTTP/2: the stream stays open while the body keeps coming.
    let (_client, mut upload) = h2_upload_answered_413(s.gateway.addr, &piece).await;
    send_unreset(&mut upload, &piece, sending, Duration::from_millis(50)).await;
    s.assert_clean();
}

/// Over HTTP/2 the reading on after an early answer is work in progress on
/// its connection: the connection is not closed as idle (no request started
/// for two `header_read_timeout` periods, 1 s here) while the client keeps
/// sending, and the stream stays open as long as it would over HTTP/1.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_stream_read_on_after_its_answer_keeps_its_connection_open() {
    let s = setup("linger-h2-idle").await;
    let piece = bytes::Bytes::from(vec![b'x'; 16 * 1024]);
    let (_client, mut upload) = h2_upload_answered_413(s.gateway.addr, &piece).await;
    send_unreset(
        &mut upload,
        &piece,
        Duration::from_secs(4),
        Duration::from_millis(100),
    )
    .await;
    s.assert_clean();
}

/// A connection reading on after its answer has no request in flight: on
/// SIGTERM it reads on for 0.5 s more at most, so a client still sending
/// the body it was answered 413 for does not hold the process's exit for
/// the whole `shutdown_grace`, over HTTP/1 or HTTP/2.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_reading_on_after_its_answer_does_not_hold_a_shutdown() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("linger-shutdown");
    let gateway = GatewayProcess::start(
        &dir,
        &upstream.url(),
        &config().server("shutdown_grace", "10s"),
    );
    let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
    stream.write_all(UPLOAD_HEAD).await.expect("head");
    let reply = raw::read_reply(&mut stream, WITHIN).await;
    assert_eq!(reply.status, Some(413), "{reply:?}");
    // The client goes on sending its body, a piece every 100 ms.
    let sending = tokio::spawn(async move {
        while stream.write_all(&[b'x'; 1024]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    // And over HTTP/2, a stream whose client goes on sending.
    let piece = bytes::Bytes::from(vec![b'x'; 1024]);
    let (_client, mut upload) = h2_upload_answered_413(gateway.addr, &piece).await;
    let sending_h2 = tokio::spawn(async move {
        loop {
            upload.reserve_capacity(piece.len());
            if upload.send_data(piece.clone(), false).is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateway.terminate_within(Duration::from_secs(3)).await;
    sending.abort();
    sending_h2.abort();
}

/// A client that declares a large keyed body and sends it slowly holds only
/// what it has sent of the budget for bodies held at once, not what it
/// declared: a few such clients, having sent next to nothing, would
/// otherwise hold all of it, and every other large body would be refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_sender_holds_only_what_it_has_sent_of_the_body_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("body-budget-slow");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "96KiB")
        .server("header_read_timeout", "3s")
        .upstream(Upstream::api().timeout("5s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let admin = gateway.admin_client();

    // Two slow senders declare 60 KiB each and send 1 KiB.
    let mut slow = Vec::new();
    for key in ["slow-1", "slow-2"] {
        let mut stream = TcpStream::connect(gateway.addr).await.expect("connect");
        let head = format!(
            "POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: {key}\r\n\
             Content-Type: application/json\r\nContent-Length: 61440\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(&[b' '; 1024]).await.expect("a little");
        slow.push(stream);
    }
    let started = Instant::now();
    loop {
        let metrics = admin.get("/metrics").await.text();
        if metrics.contains("idemgate_buffered_body_bytes 2048") {
            break;
        }
        assert!(started.elapsed() < WITHIN, "{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A large body still fits beside them.
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(60 * 1024));
    let reply = gateway
        .client()
        .post("/v1/charges", Some("big"), &big)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    for mut stream in slow {
        let reply = raw::read_reply(&mut stream, WITHIN).await;
        assert_eq!(reply.status, Some(408), "{reply:?}");
    }
    assert_eq!(
        upstream.executions("slow-1") + upstream.executions("slow-2"),
        0
    );
}

/// The head of a keyed POST declaring a 100 MiB body, over HTTP/1: its 413
/// is due at once (`max_request_body` is 1 KiB here).
const UPLOAD_HEAD: &[u8] = b"POST /v1/charges HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: k-up\r\n\
      Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n";

/// The same over HTTP/2, its first `piece` sent and its 413 read: the
/// connection, and the stream to go on sending on.
async fn h2_upload_answered_413(
    addr: std::net::SocketAddr,
    piece: &bytes::Bytes,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    h2::SendStream<bytes::Bytes>,
) {
    let mut client = common::h2::connect(addr).await;
    let request = http::Request::post(format!("http://{addr}/v1/charges"))
        .header("content-length", "104857600")
        .header("idempotency-key", "k-up2")
        .body(())
        .expect("request");
    let (answer, mut upload) = client.send_request(request, false).expect("sent");
    upload.send_data(piece.clone(), false).expect("first piece");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer in time")
        .expect("an answer, not a reset");
    assert_eq!(answer.status(), 413);
    (client, upload)
}

/// Sends `piece` every `gap` for `sending`, the stream never reset meanwhile.
async fn send_unreset(
    upload: &mut h2::SendStream<bytes::Bytes>,
    piece: &bytes::Bytes,
    sending: Duration,
    gap: Duration,
) {
    let started = Instant::now();
    while started.elapsed() < sending {
        let reset =
            tokio::time::timeout(gap, std::future::poll_fn(|cx| upload.poll_reset(cx))).await;
        assert!(
            reset.is_err(),
            "reset after {:?} of sending: {reset:?}",
            started.elapsed()
        );
        upload.reserve_capacity(piece.len());
        upload
            .send_data(piece.clone(), false)
            .expect("more of the body");
    }
}

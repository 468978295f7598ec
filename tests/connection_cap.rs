//! `max_connections` reached: a new connection closes the connection that
//! has waited longest without a request in progress (no head yet, a TLS
//! handshake not finished, a keep-alive or HTTP/2 connection between
//! requests), so connections that send nothing cannot keep `/healthz`,
//! `/readyz` or the data plane from a client for `header_read_timeout`.
//! One with a request in progress is never closed for it: when every
//! connection has one, a newcomer waits for a slot (docs/operating.md).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::certs::Pki;
use common::config::{Config, Route, Tls, Upstream};
use common::raw::{self, RawReply};
use common::{GatewayProcess, MockUpstream, TestDir};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const CAP: usize = 4;
/// Far longer than a probe may wait (a Kubernetes probe's default timeout
/// is 1 s): connections that send nothing would hold their slots this long.
const HEADER_READ_TIMEOUT: &str = "5s";
/// The longest a probe may take here, a loaded machine included: well
/// under `HEADER_READ_TIMEOUT`, which it took before a newcomer could take
/// an idle connection's place.
const PROMPT: Duration = Duration::from_millis(2500);
const WITHIN: Duration = Duration::from_secs(20);

fn config() -> Config {
    Config::new()
        .server("max_connections", CAP as i64)
        .server("header_read_timeout", HEADER_READ_TIMEOUT)
        .upstream(Upstream::api().timeout("10s"))
        .route(Route::api("rest", "/").plain())
}

/// `CAP` connections to `addr`, each having sent `sent`, accepted by the
/// gateway by the time this returns.
async fn hold(addr: SocketAddr, sent: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(sent).await.expect("write");
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    held
}

/// Long enough for the gateway to have seen connections closed by the
/// test (or by itself) before the next step.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// `GET path` on a connection of its own, and how long its answer took.
async fn timed_get(addr: SocketAddr, path: &str) -> (RawReply, Duration) {
    let started = Instant::now();
    let request = format!("GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n");
    let reply = raw::exchange(addr, request.as_bytes(), WITHIN).await;
    (reply, started.elapsed())
}

/// `idemgate_connections_evicted_total{listener}` is at least `least`: a
/// loaded machine may not have given back the slots of the connections a
/// step closed before the next step's connections come, which then take
/// the place of one more idle connection (never of one with a request).
async fn assert_evicted_at_least(gateway: &GatewayProcess, listener: &str, least: u64) {
    let count = evicted(gateway, listener)
        .await
        .expect("the series is there");
    assert!(
        count >= least,
        "{count} evicted on {listener}, {least} at least"
    );
}

/// The value of `idemgate_connections_evicted_total{listener}`.
async fn evicted(gateway: &GatewayProcess, listener: &str) -> Option<u64> {
    let metrics = gateway.admin_client().get("/metrics").await.text();
    let series = format!("idemgate_connections_evicted_total{{listener=\"{listener}\"}} ");
    let count = metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|value| value.parse().expect("a count"));
    // The scrape's own connection, closed.
    settle().await;
    count
}

/// What a connection that holds a slot without a request in progress may
/// have sent: nothing, part of a head, or a whole request answered and
/// then nothing more (keep-alive).
const IDLE_KINDS: [(&str, &[u8]); 3] = [
    ("silent", b""),
    ("part of a head", b"GET /healthz HTTP/1.1\r\nHo"),
    ("keep-alive", b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"),
];

#[tokio::test(flavor = "multi_thread")]
async fn probes_are_answered_at_once_behind_connections_without_a_request() {
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("cap-probes", &config()).await;
    for (kind, sent) in IDLE_KINDS {
        let held = hold(gateway.admin, sent).await;
        for path in ["/healthz", "/readyz"] {
            let (reply, took) = timed_get(gateway.admin, path).await;
            assert_eq!(reply.status, Some(200), "{kind} {path}: {reply:?}");
            assert!(took < PROMPT, "{kind} {path}: answered after {took:?}");
            settle().await;
        }
        drop(held);
        settle().await;
    }
    // The first probe behind each kind took a held connection's slot; the
    // second, the first one's, given back.
    assert_evicted_at_least(&gateway, "admin", 3).await;
    assert_eq!(evicted(&gateway, "data").await, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_plane_serves_at_once_behind_connections_without_a_request() {
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh("cap-data", &config()).await;
    for (kind, sent) in IDLE_KINDS {
        let held = hold(gateway.addr, sent).await;
        let (reply, took) = timed_get(gateway.addr, "/pass").await;
        assert_eq!(reply.status, Some(201), "{kind}: {reply:?}");
        assert!(took < PROMPT, "{kind}: answered after {took:?}");
        drop(held);
        settle().await;
    }
    // The keep-alive connections' own requests (the path was the admin
    // plane's) and the three served here.
    assert_eq!(upstream.total(), CAP as u64 + 3);
    assert_evicted_at_least(&gateway, "data", 3).await;
}

/// Requests at a slow upstream on `n` connections of their own: their
/// answers, once they come.
fn slow_requests(addr: SocketAddr, n: usize) -> Vec<tokio::task::JoinHandle<RawReply>> {
    (0..n)
        .map(|i| {
            let request = format!(
                "GET /slow/{i}?delay_ms=2000 HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
            );
            tokio::spawn(async move { raw::exchange(addr, request.as_bytes(), WITHIN).await })
        })
        .collect()
}

/// Every one of the slow requests got its whole answer: none was cut.
async fn all_answered(busy: Vec<tokio::task::JoinHandle<RawReply>>) {
    for answer in busy {
        let reply = answer.await.expect("task");
        assert_eq!(
            reply.status,
            Some(201),
            "a request in progress was cut: {reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_with_a_request_in_progress_is_never_closed_for_a_newcomer() {
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("cap-busy", &config()).await;
    // Three requests in progress and one connection that sent nothing: the
    // newcomer takes the silent one's slot.
    let busy = slow_requests(gateway.addr, CAP - 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut silent = TcpStream::connect(gateway.addr).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reply, took) = timed_get(gateway.addr, "/pass").await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert!(took < PROMPT, "answered after {took:?}");
    assert!(
        raw::wait_closed(&mut silent, PROMPT).await,
        "the silent connection was not the one closed"
    );
    all_answered(busy).await;
    settle().await;
    assert_evicted_at_least(&gateway, "data", 1).await;

    // Every connection with a request in progress: the newcomer waits for
    // one to end.
    let busy = slow_requests(gateway.addr, CAP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reply, took) = timed_get(gateway.addr, "/pass").await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert!(
        took > Duration::from_millis(1000),
        "answered after {took:?}"
    );
    all_answered(busy).await;
    assert_evicted_at_least(&gateway, "data", 1).await;
}

/// An HTTP/2 connection with a stream open is busy; one with none is not.
#[tokio::test(flavor = "multi_thread")]
async fn an_http2_connection_is_closed_for_a_newcomer_only_with_no_stream_open() {
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("cap-h2", &config()).await;
    let addr = gateway.addr;
    let get = |path: String| {
        http::Request::get(format!("http://{addr}{path}"))
            .body(())
            .expect("request")
    };
    // One connection between requests, opened first (the longest idle)...
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, idle) = h2::client::handshake(tcp).await.expect("handshake");
    let idle = tokio::spawn(idle);
    let mut client = client.ready().await.expect("ready");
    let answer = common::h2::send(&mut client, get("/pass".into())).await;
    assert_eq!(answer.status(), 201);
    // ...then three with a stream each at a slow upstream.
    let mut streams = Vec::new();
    for i in 0..CAP - 1 {
        let mut busy = common::h2::connect(addr).await;
        let (answer, _) = busy
            .send_request(get(format!("/slow/{i}?delay_ms=2000")), true)
            .expect("sent");
        streams.push((busy, answer));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reply, took) = timed_get(addr, "/pass").await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert!(took < PROMPT, "answered after {took:?}");
    let ended = tokio::time::timeout(PROMPT, idle).await;
    assert!(
        ended.is_ok(),
        "the idle HTTP/2 connection was not the one closed"
    );
    for (_client, answer) in streams {
        let answer = tokio::time::timeout(WITHIN, answer)
            .await
            .expect("an answer in time")
            .expect("a stream in progress was cut");
        assert_eq!(answer.status(), 201);
    }
    assert_evicted_at_least(&gateway, "data", 1).await;
}

/// A TLS connection whose handshake is not over has no request in
/// progress either.
#[tokio::test(flavor = "multi_thread")]
async fn tls_connections_still_in_their_handshake_give_way() {
    let dir = TestDir::new("cap-tls");
    let pki = Pki::new("test CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(
        &dir,
        &upstream.url(),
        &config().server_tls(Tls::of(&server)),
    );
    // Silent ones, and ones stopped in the middle of their ClientHello.
    let hello_start = [
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    for sent in [&[][..], &hello_start] {
        let held = hold(gateway.addr, sent).await;
        let client = common::tls_client::tls_client(&pki.ca_pem(), None, false);
        let started = Instant::now();
        let reply =
            common::tls_client::send(&client, "GET", gateway.addr.port(), "/pass", &[], b"")
                .await
                .expect("served");
        assert_eq!(reply.status, 201);
        assert!(
            started.elapsed() < PROMPT,
            "answered after {:?}",
            started.elapsed()
        );
        drop((held, client));
        settle().await;
    }
    assert_evicted_at_least(&gateway, "data", 2).await;
}

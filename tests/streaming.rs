//! Long-lived and streaming exchanges through the gateway: Server-Sent
//! Events, long polls, and WebSocket handshakes, which are not proxied.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::config::{Config, Route, Upstream};
use common::raw;
use common::{GatewayProcess, MockUpstream, TestDir};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::{TokioExecutor, TokioIo};

const WITHIN: Duration = Duration::from_secs(10);

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    GatewayProcess::start_fresh(name, &Config::charges_and_rest()).await
}

/// A WebSocket handshake (RFC 6455 §4.1) is answered by the gateway itself,
/// a problem naming WebSocket, and never reaches the upstream, on a
/// pass-through route and a keyed one alike: passed on without its
/// `Upgrade`, it would be a plain GET whose answer (an upstream's 400
/// about a missing upgrade, or a 200 page) tells the client nothing.
#[tokio::test]
async fn a_websocket_handshake_is_refused_with_a_problem_naming_websocket() {
    let (_dir, upstream, gateway) = setup("websocket").await;
    for (path, upgrade) in [
        ("/chat", "websocket"),
        ("/v1/charges/stream", "WebSocket"),
        ("/chat", "foo/2, websocket"),
    ] {
        let handshake = format!(
            "GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        let reply = raw::exchange(gateway.addr, handshake.as_bytes(), WITHIN).await;
        assert_eq!(reply.status, Some(400), "{upgrade} {path}: {reply:?}");
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("application/problem+json")
        );
        let problem: serde_json::Value = serde_json::from_str(reply.body()).expect("a problem");
        assert_eq!(problem["code"], "bad-request", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("WebSocket"),
            "{problem}"
        );
    }
    assert_eq!(upstream.total(), 0, "no handshake reaches the upstream");
}

/// Other upgrades are ignored, as RFC 9110 §7.8 lets a server do: curl's
/// `--http2` over http asks for `h2c` on its first request, which goes on
/// over HTTP/1.1 without the `Upgrade`.
#[tokio::test]
async fn an_h2c_upgrade_is_ignored_and_the_request_forwarded() {
    let (_dir, upstream, gateway) = setup("h2c-upgrade").await;
    let request = b"GET /chat HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade, HTTP2-Settings\r\n\
                    Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
    let reply = raw::exchange(gateway.addr, request, WITHIN).await;
    assert_eq!(reply.status, Some(201), "{reply:?}");
    assert_eq!(upstream.total(), 1);
    assert_eq!(upstream.last_header("upgrade"), None);
}

/// An upstream of Server-Sent Events over HTTP/1 and HTTP/2: one event at
/// once, two more `gap` apart, then the end.
async fn event_stream(gap: Duration) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| async move {
                    let events = futures_util::stream::unfold(0, move |n| async move {
                        match n {
                            0 => {}
                            1 | 2 => tokio::time::sleep(gap).await,
                            _ => return None,
                        }
                        let event = Frame::data(Bytes::from(format!("id: {n}\ndata: {n}\n\n")));
                        Some((Ok::<_, Infallible>(event), n + 1))
                    });
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(StreamBody::new(events))
                            .unwrap(),
                    )
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Each event of a pass-through event stream reaches the client as the
/// upstream sends it, not when the stream ends: HTTP/1 and HTTP/2 clients,
/// HTTP/1 and HTTP/2 upstreams, the stream longer than the upstream's
/// `timeout` (a pass-through's `timeout` bounds each wait for the next
/// piece, not the whole answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_events_reach_the_client_as_they_are_sent() {
    let gap = Duration::from_secs(2);
    let upstream = event_stream(gap).await;
    for http2_upstream in [false, true] {
        let dir = TestDir::new("events");
        let config = Config::new()
            .upstream(Upstream::api().timeout("3s").set("http2", http2_upstream))
            .route(Route::api("rest", "/").plain());
        let gateway = GatewayProcess::start(&dir, &format!("http://{upstream}"), &config);
        for http2_client in [false, true] {
            let client = HyperClient::builder(TokioExecutor::new())
                .http2_only(http2_client)
                .build_http::<Empty<Bytes>>();
            let what = format!("upstream h2 {http2_upstream}, client h2 {http2_client}");
            let asked = Instant::now();
            let answer = client
                .get(format!("http://{}/events", gateway.addr).parse().unwrap())
                .await
                .expect("an answer");
            assert_eq!(answer.status(), 200, "{what}");
            let mut body = answer.into_body();
            let mut seen = Vec::new();
            while let Some(frame) = tokio::time::timeout(WITHIN, body.frame())
                .await
                .expect("the stream in time")
            {
                if let Ok(data) = frame.expect("a frame").into_data() {
                    seen.push((asked.elapsed(), data));
                }
            }
            let text: Vec<u8> = seen.iter().flat_map(|(_, data)| data.to_vec()).collect();
            assert_eq!(
                text, b"id: 0\ndata: 0\n\nid: 1\ndata: 1\n\nid: 2\ndata: 2\n\n",
                "{what}"
            );
            let (first, _) = seen[0];
            assert!(
                first < Duration::from_millis(1000),
                "{what}: the first event came after {first:?}"
            );
            // Two gaps: longer than the upstream's `timeout`, whole.
            let (last, _) = seen[seen.len() - 1];
            assert!(last >= gap * 2, "{what}: {last:?}");
        }
    }
}

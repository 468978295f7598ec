//! Long-lived and streaming exchanges through the gateway: Server-Sent
//! Events, long polls, and WebSocket handshakes, which are not proxied.

mod common;

use std::time::Duration;

use common::config::Config;
use common::raw;
use common::{GatewayProcess, MockUpstream, TestDir};

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

//! The gateway as a plain reverse proxy (pass-through routes and methods).

mod common;

use std::time::Duration;

use common::config::{Config, Upstream};
use common::{Client, GatewayProcess, MockUpstream, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config() -> Config {
    Config::charges_and_rest()
}

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    GatewayProcess::start_fresh(name, &config()).await
}

#[tokio::test]
async fn passes_method_path_query_headers_and_body_through() {
    let (_dir, _upstream, gateway) = setup("passthrough").await;
    let client = gateway.client();
    for method in ["GET", "PUT", "DELETE", "POST"] {
        let reply = client
            .send(
                method,
                "/echo?a=1&b=two",
                &[("x-custom", "kept"), ("host", "api.example.com")],
                "payload-bytes",
            )
            .await;
        assert_eq!(reply.status, 200, "{method}: {}", reply.text());
        let echo = reply.json();
        assert_eq!(echo["method"], method);
        assert_eq!(echo["path"], "/echo");
        assert_eq!(echo["query"], "a=1&b=two");
        assert_eq!(echo["body"], "payload-bytes");
        assert_eq!(echo["headers"]["x-custom"], "kept");
        assert_eq!(echo["headers"]["host"], "api.example.com");
        assert!(
            reply.header("idempotent-replayed").is_none(),
            "pass-through carries no marker"
        );
    }
}

#[tokio::test]
async fn drops_hop_by_hop_headers_and_sets_forwarded_headers() {
    let (_dir, _upstream, gateway) = setup("hop").await;
    let reply = gateway
        .client()
        .send(
            "GET",
            "/echo",
            &[
                ("host", "shop.example"),
                ("connection", "x-hop-secret"),
                ("x-hop-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("proxy-authorization", "Basic Zm9vOmJhcg=="),
                ("te", "trailers"),
                ("x-forwarded-for", "203.0.113.9"),
            ],
            "",
        )
        .await;
    assert_eq!(reply.status, 200);
    let headers = &reply.json()["headers"];
    for gone in ["x-hop-secret", "keep-alive", "proxy-authorization", "te"] {
        assert!(
            headers.get(gone).is_none(),
            "{gone} was forwarded: {headers}"
        );
    }
    assert_eq!(headers["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["x-forwarded-host"], "shop.example");
    assert_eq!(headers["host"], "shop.example");
}

/// `Connection` may name any field, `Host` too; removing it must not change
/// which host the upstream is sent (it got the upstream's own, while
/// `X-Forwarded-Host` named the client's).
#[tokio::test]
async fn a_host_named_in_connection_is_still_the_host_sent_on() {
    let (_dir, _upstream, gateway) = setup("hop-host").await;
    let head =
        "GET /echo HTTP/1.1\r\nHost: shop.example\r\nConnection: host, x-hop\r\nX-Hop: 1\r\n\r\n";
    let reply = common::raw::exchange(gateway.addr, head.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(200), "{}", reply.text);
    let echo: serde_json::Value = serde_json::from_str(reply.body()).unwrap();
    assert_eq!(echo["headers"]["host"], "shop.example", "{echo}");
    assert_eq!(echo["headers"]["x-forwarded-host"], "shop.example");
    assert!(echo["headers"].get("x-hop").is_none(), "{echo}");
}

fn assert_problem(reply: &common::Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let problem = reply.json();
    assert_eq!(problem["code"], code);
    assert_eq!(problem["status"], status);
    assert!(problem["title"].is_string() && problem["detail"].is_string());
}

#[tokio::test]
async fn no_route_is_a_404_problem() {
    let dir = TestDir::new("noroute");
    let upstream = MockUpstream::start().await;
    let config = config().with_route("rest", |r| r.path_prefix("/api"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let reply = gateway.client().get("/elsewhere").await;
    assert_problem(&reply, 404, "no-route");
    assert_eq!(upstream.total(), 0);
}

/// docs/behaviour.md, "Path prefixes": the hex digits of a percent-escape
/// match in either case (RFC 3986 §6.2.2.1: `%c3%a9` and `%C3%A9` are one
/// path), the route written either way; the upstream gets the path as
/// sent. Tried in turn (a few routes) and through the route index (many).
#[tokio::test]
async fn percent_escapes_match_in_either_case() {
    use common::config::Route;
    for fillers in [0, 40] {
        let mut config = Config::new().upstream(Upstream::api());
        for i in 0..fillers {
            config = config.route(Route::api(&format!("filler{i}"), &format!("/f{i}/")).plain());
        }
        let config = config
            .route(Route::api("upper", "/caf%C3%A9").plain())
            .route(Route::api("lower", "/t%c3%a9").plain())
            .route(Route::new("exact", "api").path("/x%2Fy").plain())
            .route(Route::api("open", "/p%c").plain());
        let dir = TestDir::new(&format!("percent-case-{fillers}"));
        let upstream = MockUpstream::start().await;
        let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
        let client = gateway.client();
        for sent in [
            "/caf%C3%A9",
            "/caf%c3%a9/menu",
            "/caf%C3%a9",
            "/t%C3%A9",
            "/t%c3%a9",
            "/x%2fy",
            "/x%2Fy",
            "/p%C3",
        ] {
            let reply = client.get(sent).await;
            assert_eq!(reply.status, 201, "{fillers} {sent}: {}", reply.text());
            assert_eq!(reply.json()["path"], sent, "{fillers}: forwarded as sent");
        }
        for unmatched in ["/caf%c3%a8", "/cafe", "/x%2fy/z", "/caf%C3"] {
            let reply = client.get(unmatched).await;
            assert_problem(&reply, 404, "no-route");
        }
    }
}

#[tokio::test]
async fn refused_upstream_is_502_and_slow_upstream_is_504() {
    let dir = TestDir::new("upstream-errors");
    let closed = common::gateway::free_port();
    let gateway = GatewayProcess::start(&dir, &format!("http://{closed}"), &config());
    assert_problem(
        &gateway.client().get("/anything").await,
        502,
        "upstream-unreachable",
    );

    let (_dir, _upstream, gateway) = setup("timeout").await;
    assert_problem(
        &gateway.client().get("/slow?delay_ms=3000").await,
        504,
        "upstream-timeout",
    );
}

/// docs/operating.md#failures-that-repeat: an upstream refusing every
/// connection is logged once with its cause, not once per request (a busy
/// gateway would flood its log pipeline in the outage); the metrics count
/// every request.
#[tokio::test]
async fn a_refusing_upstream_is_logged_once_per_route_not_per_request() {
    let dir = TestDir::new("upstream-refused-log");
    let closed = common::gateway::free_port();
    let gateway = GatewayProcess::start(
        &dir,
        &format!("http://{closed}"),
        &Config::charges_and_rest(),
    );
    let client = gateway.client();
    for n in 0..150 {
        let keyed = client
            .post("/v1/charges", Some(&format!("k-{n}")), "{}")
            .await;
        assert_problem(&keyed, 502, "upstream-unreachable");
        assert_problem(&client.get("/anything").await, 502, "upstream-unreachable");
    }
    let log = gateway.log_text();
    for route in ["charges", "rest"] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("upstream unreachable") && l.contains(&format!("route={route}")))
            .collect();
        assert_eq!(lines.len(), 1, "{route}:\n{}", lines.join("\n"));
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
        assert!(
            lines[0].contains("refused"),
            "names the cause: {}",
            lines[0]
        );
        assert!(
            lines[0].contains(&format!("upstream=\"api\" upstream_addr={closed} ")),
            "names the upstream and the address it dialed: {}",
            lines[0]
        );
    }
    let metrics = gateway.admin_client().get("/metrics").await.text();
    for route in ["charges", "rest"] {
        let line =
            format!("idemgate_requests_total{{outcome=\"upstream_error\",route=\"{route}\"}} 150");
        assert!(metrics.contains(&line), "missing `{line}`:\n{metrics}");
    }
}

/// An upstream named by a host name that does not resolve (RFC 6761
/// `.invalid`): each request is a 502 `upstream-unreachable` with its key
/// freed (the retry is tried again, not refused as in flight), and the
/// log line names the host and says it did not resolve, not a generic
/// connection failure. docs/behaviour.md, the failure table.
#[tokio::test]
async fn an_upstream_name_that_does_not_resolve_is_502_and_the_log_names_the_host() {
    let dir = TestDir::new("upstream-no-name");
    let gateway = GatewayProcess::start(
        &dir,
        "http://no-such-upstream.invalid:8080",
        &Config::charges_and_rest(),
    );
    let client = gateway.client();
    for _ in 0..2 {
        let keyed = client.post("/v1/charges", Some("no-name"), "{}").await;
        assert_problem(&keyed, 502, "upstream-unreachable");
    }
    assert_problem(&client.get("/anything").await, 502, "upstream-unreachable");
    for route in ["charges", "rest"] {
        let line = gateway
            .logged_line(&format!("route={route}"), Duration::from_secs(2))
            .await
            .expect("a log line for the route");
        assert!(line.contains("upstream unreachable"), "{line}");
        assert!(
            line.contains("no-such-upstream.invalid does not resolve"),
            "names the host and the cause: {line}"
        );
    }
}

/// The upstream `timeout` (1 s) counts from each request, also on a pooled
/// connection whose last request started most of a timeout ago: a slow
/// answer within its own second is relayed, and one past it is a 504 at
/// about that second, not sooner.
#[tokio::test]
async fn each_request_on_a_reused_connection_gets_the_whole_timeout() {
    let (_dir, _upstream, gateway) = setup("timeout-reused").await;
    let client = gateway.client();
    assert!(client.get("/things/1").await.status.is_success());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let slow = client.get("/things/2?delay_ms=700").await;
    assert!(slow.status.is_success(), "{}", slow.text());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let late = client.get("/things/3?delay_ms=3000").await;
    assert_problem(&late, 504, "upstream-timeout");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "cut off after {waited:?}"
    );
}

/// An upstream that sends its head and then goes quiet mid-body is cut off
/// by its `timeout` (1 s here), not waited on for ever: a small body (read
/// whole before the head goes out) is a 504; a streamed one ends the
/// client's connection short of its declared length.
#[tokio::test]
async fn an_upstream_stalled_mid_body_is_cut_off_by_its_timeout() {
    let (_dir, _upstream, gateway) = setup("stall").await;
    let started = std::time::Instant::now();
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        gateway.client().get("/stall?bytes=100&sent=10"),
    )
    .await
    .expect("an answer, not a hang");
    assert_problem(&reply, 504, "upstream-timeout");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let started = std::time::Instant::now();
    let reply = common::raw::exchange(
        gateway.addr,
        b"GET /stall?bytes=100000&sent=70000 HTTP/1.1\r\nHost: gw\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        reply.status,
        Some(200),
        "{}",
        &reply.text[..200.min(reply.text.len())]
    );
    assert!(reply.closed, "the connection must end, not hang");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let body = reply
        .text
        .split_once("\r\n\r\n")
        .map_or(0, |(_, b)| b.len());
    assert!((70_000..100_000).contains(&body), "{body} body bytes");
}

/// docs/behaviour.md: on a keyed route an answer whose body stalls after
/// its head for the upstream's `timeout` timed out: 504 `outcome-unknown`,
/// stored, every time. (The body's idle limit and the execution's deadline
/// end together; which came first made it a 502 "broken" about half the
/// time.)
#[tokio::test]
async fn a_keyed_answer_stalled_mid_body_is_a_stored_timeout() {
    let config = Config::new()
        .server("shutdown_grace", "5s")
        .upstream(Upstream::api().timeout("1s"))
        .defaults("lock_timeout", "5s")
        .route(common::config::Route::api("stall", "/stall"))
        .route(common::config::Route::api("rest", "/").plain());
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("stall-keyed", &config).await;
    let client = gateway.client();
    let keys: Vec<String> = (0..6).map(|n| format!("stall-{n}")).collect();
    let replies = futures_util::future::join_all(
        keys.iter()
            .map(|key| client.post("/stall?bytes=100&sent=10", Some(key), "{}")),
    )
    .await;
    for (key, reply) in keys.iter().zip(&replies) {
        assert_problem(reply, 504, "outcome-unknown");
        let again = client
            .post("/stall?bytes=100&sent=10", Some(key), "{}")
            .await;
        assert_eq!(again.status, 504, "{key}: {}", again.text());
        assert_eq!(again.header("idempotent-replayed"), Some("true"), "{key}");
    }
}

/// docs/behaviour.md: an answer over `max_stored_response` is recorded (its
/// status and headers) once it passes the limit, before the rest streams:
/// the upstream answered, so a rest that then stalls cuts the client's
/// connection short, and a retry is told that status with the body
/// omitted, never run again nor told the outcome is unknown.
#[tokio::test]
async fn an_answer_over_the_stored_limit_that_stalls_is_replayed_as_omitted() {
    let config = Config::new()
        .server("shutdown_grace", "5s")
        .server("max_stored_response", "64KiB")
        .upstream(Upstream::api().timeout("1s"))
        .defaults("lock_timeout", "5s")
        .route(common::config::Route::api("stall", "/stall"));
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("stall-oversized", &config).await;
    let request = b"POST /stall?bytes=100000&sent=70000 HTTP/1.1\r\nHost: gw\r\n\
        Idempotency-Key: big-stall\r\nContent-Length: 2\r\n\r\n{}";
    let first = common::raw::exchange(gateway.addr, request, Duration::from_secs(10)).await;
    assert_eq!(
        first.status,
        Some(200),
        "{}",
        &first.text[..200.min(first.text.len())]
    );
    assert!(first.closed, "the connection must end, not hang");
    let body = first
        .text
        .split_once("\r\n\r\n")
        .map_or(0, |(_, b)| b.len());
    assert!((70_000..100_000).contains(&body), "{body} body bytes");

    let again = gateway
        .client()
        .post("/stall?bytes=100000&sent=70000", Some("big-stall"), "{}")
        .await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.header("idempotency-replay"), Some("omitted"));
    assert!(again.body.is_empty());
}

/// A request with both Content-Length and Transfer-Encoding is refused with a
/// 400 before anything is forwarded, and its connection is closed, so nothing
/// smuggled behind it is read either.
#[tokio::test]
async fn refuses_ambiguous_framing_without_forwarding() {
    let (_dir, upstream, gateway) = setup("smuggling").await;
    for (clean_first, ambiguous) in [
        (false, "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
        (true, "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"),
    ] {
        let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
        let mut bytes = Vec::new();
        if clean_first {
            bytes.extend_from_slice(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok",
            );
        }
        bytes.extend_from_slice(
            format!("POST /echo HTTP/1.1\r\nHost: x\r\n{ambiguous}\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
                .as_bytes(),
        );
        stream.write_all(&bytes).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
            .await
            .expect("the connection must be closed after the answer")
            .unwrap();
        let text = String::from_utf8_lossy(&answer);
        let statuses: Vec<&str> = text.matches("HTTP/1.1 ").collect();
        assert_eq!(statuses.len(), if clean_first { 2 } else { 1 }, "{text}");
        assert!(text.contains("HTTP/1.1 400"), "{text}");
        assert!(text.contains("bad-request"), "{text}");
        assert!(
            !text.contains("smuggled"),
            "a smuggled request was read: {text}"
        );
    }
    assert_eq!(upstream.last_header("transfer-encoding"), None);
}

#[tokio::test]
async fn speaks_h2c_with_prior_knowledge() {
    let (_dir, _upstream, gateway) = setup("h2c").await;
    let reply = Client::h2c(gateway.addr).get("/echo?x=1").await;
    assert_eq!(reply.status, 200);
    let echo = reply.json();
    assert_eq!(echo["query"], "x=1");
    // Over HTTP/2 the client's :authority reaches the upstream as Host.
    assert_eq!(echo["headers"]["host"], gateway.addr.to_string());
}

#[tokio::test]
async fn streams_64_mib_each_way_without_buffering() {
    let (_dir, _upstream, gateway) = setup("stream").await;
    const SIZE: usize = 64 * 1024 * 1024;
    let client = gateway.client();
    let reply = client.send("PUT", "/sink", &[], vec![b'y'; SIZE]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), SIZE.to_string());

    let reply = client.get(&format!("/big?bytes={SIZE}")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.len(), SIZE);

    let peak = gateway.memory_kib("VmHWM");
    assert!(
        peak < 40 * 1024,
        "gateway peaked at {peak} KiB while streaming 64 MiB"
    );
}

#[tokio::test]
async fn graceful_shutdown_lets_a_slow_request_finish() {
    let (_dir, _upstream, mut gateway) = setup("graceful").await;
    let client = gateway.client();
    let slow = tokio::spawn(async move { client.get("/v1/charges?delay_ms=700").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gateway.signal("TERM");
    // New connections are refused once the listener closes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(gateway.addr).await.is_err());
    let reply = slow.await.unwrap();
    assert_eq!(reply.status, 201);
    let status = gateway.wait_exit(Duration::from_secs(5));
    assert!(status.success(), "{status}");
}

/// During the drain an HTTP/1 answer tells its kept-alive connection to
/// close (`Connection: close`), and the connection closes after it; an idle
/// kept-alive connection is closed at once (docs/operating.md, Shutdown).
#[tokio::test]
async fn the_drain_closes_kept_alive_http1_connections() {
    let (_dir, _upstream, mut gateway) = setup("drain-keep-alive").await;
    let head = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n");
    let mut idle = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    idle.write_all(head("/echo").as_bytes()).await.unwrap();
    let first = common::raw::read_reply(&mut idle, Duration::from_secs(10)).await;
    assert_eq!(first.status, Some(200), "{}", first.text);
    assert_eq!(first.header("connection"), None, "{}", first.text);
    let mut busy = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    busy.write_all(head("/v1/charges?delay_ms=600").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    gateway.signal("TERM");
    assert!(
        common::raw::wait_closed(&mut idle, Duration::from_millis(500)).await,
        "the idle connection stayed open"
    );
    let answer = common::raw::read_reply(&mut busy, Duration::from_secs(10)).await;
    assert_eq!(answer.status, Some(201), "{}", answer.text);
    assert_eq!(answer.header("connection").as_deref(), Some("close"));
    assert!(common::raw::wait_closed(&mut busy, Duration::from_secs(2)).await);
    let status = gateway.wait_exit(Duration::from_secs(5));
    assert!(status.success(), "{status}");
}

/// An HTTP/2 client that resets its stream during a shutdown leaves no
/// connection open, yet its keyed request runs at the upstream: the process
/// waits for that execution and records it, so a retry replays it instead
/// of meeting a lease nothing will complete (and, once it lapsed, running
/// the key again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_records_a_keyed_execution_whose_http2_client_left() {
    let config = Config::new()
        .server("shutdown_grace", "30s")
        .upstream(Upstream::api().timeout("20s"))
        .defaults("lock_timeout", "25s")
        .route(common::config::Route::api("charges", "/v1/charges"));
    let (_dir, upstream, mut gateway) =
        GatewayProcess::start_fresh("graceful-h2-reset", &config).await;
    let client = Client::h2c(gateway.addr);
    let request = tokio::spawn(async move {
        client
            .post("/v1/charges?delay_ms=2000", Some("left-1"), "{}")
            .await
    });
    upstream.until_executed("left-1").await;
    gateway.signal("TERM");
    // Dropping the request resets its stream, and its connection closes.
    request.abort();
    let _ = request.await;
    // The upstream answers on this runtime while the wait blocks.
    let status = tokio::task::block_in_place(|| gateway.wait_exit(Duration::from_secs(20)));
    assert!(status.success(), "{status}");

    gateway.restart();
    let retry = gateway
        .client()
        .post("/v1/charges?delay_ms=2000", Some("left-1"), "{}")
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(upstream.executions("left-1"), 1);
}

/// A keyed request still at the upstream when the grace ends is recorded as
/// outcome-unknown: its client gets that 504, and its retry (after the
/// restart) replays it instead of waiting out a lease that nothing will
/// complete and then running the request a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_the_grace_cuts_off_is_recorded_as_outcome_unknown() {
    let config = Config::new()
        .server("shutdown_grace", "500ms")
        .upstream(Upstream::api().timeout("20s"))
        .defaults("lock_timeout", "25s")
        .route(common::config::Route::api("charges", "/v1/charges"));
    let (_dir, upstream, mut gateway) = GatewayProcess::start_fresh("grace-cut-off", &config).await;
    let client = gateway.client();
    let request = tokio::spawn(async move {
        client
            .post("/v1/charges?delay_ms=10000", Some("cut-1"), "{}")
            .await
    });
    upstream.until_executed("cut-1").await;
    gateway.signal("TERM");
    let reply = request.await.unwrap();
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(reply.json()["code"], "outcome-unknown");
    assert_eq!(reply.headers["idempotent-replayed"], "false");
    let status = tokio::task::block_in_place(|| gateway.wait_exit(Duration::from_secs(5)));
    assert!(status.success(), "{status}");

    gateway.restart();
    let retry = gateway
        .client()
        .post("/v1/charges?delay_ms=10000", Some("cut-1"), "{}")
        .await;
    assert_eq!(retry.status, 504, "{}", retry.text());
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(retry.body, reply.body);
    assert_eq!(upstream.executions("cut-1"), 1);
}

/// A keyed request still waiting for a connection when the grace ends
/// (`max_connections = 1`, held by a slow one) was never sent: its key is
/// freed (502 `upstream-unreachable`, as when that wait outlasts
/// `connect_timeout`), and its retry after the restart runs it, once. It
/// was recorded as outcome-unknown, left for an operator to reconcile and
/// purge. The request holding the connection was sent: still
/// outcome-unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_the_grace_cuts_off_before_it_was_sent_frees_its_key() {
    let config = Config::new()
        .server("shutdown_grace", "500ms")
        .upstream(
            Upstream::api()
                .timeout("20s")
                .set("connect_timeout", "10s")
                .set("max_connections", 1),
        )
        .defaults("lock_timeout", "25s")
        .route(common::config::Route::api("charges", "/v1/charges"));
    let (_dir, upstream, mut gateway) =
        GatewayProcess::start_fresh("grace-cut-off-unsent", &config).await;
    let client = gateway.client();
    let sent = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post("/v1/charges?delay_ms=10000", Some("cut-sent"), "{}")
                .await
        }
    });
    upstream.until_executed("cut-sent").await;
    let waiting =
        tokio::spawn(async move { client.post("/v1/charges", Some("cut-unsent"), "{}").await });
    gateway.until_inflight(2).await;
    gateway.signal("TERM");
    let unsent = waiting.await.unwrap();
    assert_eq!(unsent.status, 502, "{}", unsent.text());
    assert_eq!(unsent.json()["code"], "upstream-unreachable");
    let detail = unsent.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("shut down before"), "{detail}");
    let sent = sent.await.unwrap();
    assert_eq!(sent.status, 504, "{}", sent.text());
    assert_eq!(sent.json()["code"], "outcome-unknown");
    let status = tokio::task::block_in_place(|| gateway.wait_exit(Duration::from_secs(5)));
    assert!(status.success(), "{status}");
    assert_eq!(upstream.executions("cut-unsent"), 0, "never sent");

    gateway.restart();
    let client = gateway.client();
    let retry = client.post("/v1/charges", Some("cut-unsent"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.headers["idempotent-replayed"], "false");
    assert_eq!(upstream.executions("cut-unsent"), 1);
    let retry = client
        .post("/v1/charges?delay_ms=10000", Some("cut-sent"), "{}")
        .await;
    assert_eq!(retry.status, 504, "{}", retry.text());
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(upstream.executions("cut-sent"), 1);
}

/// During the drain the admin plane still answers: `/readyz` says 503 so
/// that a load balancer stops sending, `/metrics` and `/healthz` answer; it
/// closes once the data plane has drained.
#[tokio::test]
async fn the_admin_plane_answers_through_the_drain() {
    let (_dir, _upstream, mut gateway) = setup("drain-admin").await;
    let admin = gateway.admin_client();
    assert_eq!(admin.get("/readyz").await.status, 200);
    let client = gateway.client();
    let slow = tokio::spawn(async move { client.get("/v1/charges?delay_ms=900").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gateway.signal("TERM");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(tokio::net::TcpStream::connect(gateway.addr).await.is_err());
    let ready = admin.get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.text(), "draining\n");
    assert_eq!(admin.get("/healthz").await.status, 200);
    let metrics = admin.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.text().contains("idemgate_inflight"));
    assert_eq!(slow.await.unwrap().status, 201);
    let status = gateway.wait_exit(Duration::from_secs(5));
    assert!(status.success(), "{status}");
    assert!(tokio::net::TcpStream::connect(gateway.admin).await.is_err());
}

/// A second SIGTERM during the drain ends it at once: the gateway does not
/// wait out `shutdown_grace` (30s here) for a request that will not finish
/// soon (20s).
#[tokio::test]
async fn a_second_sigterm_ends_the_grace_at_once() {
    let config = config()
        .upstream(Upstream::api().timeout("20s"))
        .defaults("lock_timeout", "30s")
        .server("shutdown_grace", "30s");
    let (_dir, _upstream, mut gateway) =
        GatewayProcess::start_fresh("second-sigterm", &config).await;
    let client = gateway.client();
    let _slow = tokio::spawn(async move { client.get("/v1/charges?delay_ms=20000").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    gateway.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        gateway.is_running(),
        "the first SIGTERM waits for the request in flight"
    );
    gateway.signal("TERM");
    let status = gateway.wait_exit(Duration::from_secs(3));
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn speaks_http2_to_an_upstream_configured_for_it() {
    let dir = TestDir::new("h2-upstream");
    let upstream = MockUpstream::start().await;
    let config = config().with_upstream("api", |u| u.set("http2", true));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let reply = gateway.client().get("/echo").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["version"], "HTTP/2.0");
    // The default stays HTTP/1.1.
    let (_dir, _upstream, plain) = setup("h1-upstream").await;
    assert_eq!(
        plain.client().get("/echo").await.json()["version"],
        "HTTP/1.1"
    );
}

/// Browsers over HTTP/2 send each cookie as a field of its own; the HTTP/1
/// upstream gets one `Cookie` line (RFC 9113 §8.2.3), not the first alone.
#[tokio::test]
async fn http2_cookie_fields_reach_an_http1_upstream_as_one_line() {
    let (_dir, upstream, gateway) = setup("h2-cookies").await;
    let client = Client::h2c(gateway.addr);
    for path in ["/echo", "/v1/charges"] {
        let reply = client
            .send(
                "POST",
                path,
                &[
                    ("cookie", "a=1"),
                    ("cookie", "b=2"),
                    ("idempotency-key", "cookies"),
                ],
                "{}",
            )
            .await;
        assert!(reply.status.is_success(), "{path}: {}", reply.text());
        assert_eq!(
            upstream.last_header("cookie").as_deref(),
            Some("a=1; b=2"),
            "{path}"
        );
    }
}

/// Sends a chunked body to `/sink` in `pieces` pieces `gap` apart; the
/// answer (or what came instead) as read.
async fn slow_upload(
    gateway: &GatewayProcess,
    pieces: usize,
    gap: Duration,
) -> common::raw::RawReply {
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    stream
        .write_all(b"POST /sink HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..pieces {
        tokio::time::sleep(gap).await;
        if stream.write_all(b"5\r\nabcde\r\n").await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    common::raw::read_reply(&mut stream, Duration::from_secs(10)).await
}

/// The upstream's `timeout` (1 s here) on a pass-through waits for each
/// next piece of a streamed request body, then for the answer head: an
/// upload that keeps flowing for longer is not cut off (it was: 504 once
/// the whole exchange passed 1 s), one that stops still is.
#[tokio::test]
async fn a_streamed_upload_that_keeps_flowing_outlasts_the_upstream_timeout() {
    for http2 in [false, true] {
        let dir = TestDir::new("slow-upload");
        let upstream = MockUpstream::start().await;
        let config = if http2 {
            config().with_upstream("api", |u| u.set("http2", true))
        } else {
            config()
        };
        let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
        let reply = slow_upload(&gateway, 6, Duration::from_millis(400)).await;
        assert_eq!(reply.status, Some(200), "http2 {http2}: {}", reply.text);
        assert_eq!(reply.body(), "30", "http2 {http2}");

        let started = std::time::Instant::now();
        let stalled = slow_upload(&gateway, 1, Duration::from_secs(3)).await;
        assert_eq!(stalled.status, Some(504), "http2 {http2}: {}", stalled.text);
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn too_many_header_fields_is_431() {
    let (_dir, upstream, gateway) = setup("header-count").await;
    let names: Vec<String> = (0..120).map(|i| format!("x-h{i}")).collect();
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let reply = gateway.client().send("GET", "/echo", &headers, "").await;
    assert_eq!(reply.status, 431);
    let few: Vec<(&str, &str)> = headers[..50].to_vec();
    assert_eq!(
        gateway.client().send("GET", "/echo", &few, "").await.status,
        200
    );
    assert!(upstream.last_header("x-h60").is_none());
}

/// A head at the limits (`max_headers` fields, `max_header_bytes` bytes) is
/// served: the gateway's own `X-Request-Id` used to count against them, so
/// such a head got 431.
#[tokio::test(flavor = "multi_thread")]
async fn a_head_at_the_limits_is_served() {
    let config = config()
        .server("max_headers", 20)
        .server("max_header_bytes", "2KiB");
    let (_dir, _upstream, gateway) = GatewayProcess::start_fresh("head-at-limits", &config).await;
    let fields: String = (1..20).map(|i| format!("X-H{i}: 1\r\n")).collect();
    let head = format!("GET /echo HTTP/1.1\r\nHost: gw\r\n{fields}\r\n");
    let reply = common::raw::exchange(gateway.addr, head.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(200), "20 fields: {}", reply.text);

    let names: Vec<String> = (0..20).map(|i| format!("x-h{i}")).collect();
    let headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let reply = common::Client::h2c(gateway.addr)
        .send("GET", "/echo", &headers, "")
        .await;
    assert_eq!(reply.status, 200, "20 fields over HTTP/2: {}", reply.text());

    let start = "GET /echo HTTP/1.1\r\nHost: gw\r\nX-Pad: ";
    let pad = "p".repeat(2048 - start.len() - 4);
    let head = format!("{start}{pad}\r\n\r\n");
    assert_eq!(head.len(), 2048);
    let reply = common::raw::exchange(gateway.addr, head.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(reply.status, Some(200), "a 2 KiB head: {}", reply.text);
}

/// An absolute-form target with an empty path (`http://gw?x=1`, RFC 3986
/// allows it) is the path `/` (RFC 9110 §4.2.3): the upstream gets
/// `/?x=1`. It was sent `GET ?x=1`, which is no request-target at all.
#[tokio::test]
async fn an_absolute_form_target_with_an_empty_path_goes_on_as_slash() {
    let (_dir, upstream, gateway) = setup("absolute-empty-path").await;
    for (target, query) in [("http://gw?x=1", "x=1"), ("http://gw", "")] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: gw\r\n\r\n");
        let reply =
            common::raw::exchange(gateway.addr, head.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(reply.status, Some(201), "{target}: {}", reply.text);
        let echo: serde_json::Value = serde_json::from_str(reply.body()).expect("json");
        assert_eq!(echo["path"], "/", "{target}");
        assert_eq!(echo["query"], query, "{target}");
    }
    assert_eq!(upstream.total(), 2);
}

/// `Host: a b`, `user@evil`, `x/y` and an empty
/// `Host` were forwarded as they were (and echoed in `X-Forwarded-Host`),
/// where RFC 9112 §3.2 has a server answer 400. The target's authority,
/// which becomes `Host` when there is one (an absolute-form target, an
/// HTTP/2 `:authority`), is held to the same grammar, and an absolute-form
/// target must be http(s) (`ftp://evil/x` was forwarded as `/x`).
#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_host_is_a_400_problem_and_nothing_is_forwarded() {
    let (_dir, upstream, gateway) = setup("invalid-host").await;
    for head in [
        "GET /echo HTTP/1.1\r\nHost: a b\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: user@evil\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: x/y\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost:\r\n\r\n",
        "GET /echo HTTP/1.1\r\nHost: gw:http\r\n\r\n",
        "GET /echo HTTP/1.0\r\nHost: [::1\r\n\r\n",
        "GET http://user@evil/echo HTTP/1.1\r\nHost: gw\r\n\r\n",
        "GET ftp://evil/echo HTTP/1.1\r\nHost: gw\r\n\r\n",
        "POST /v1/charges HTTP/1.1\r\nHost: a b\r\nIdempotency-Key: k\r\nContent-Length: 2\r\n\r\n{}",
    ] {
        let reply =
            common::raw::exchange(gateway.addr, head.as_bytes(), Duration::from_secs(5)).await;
        assert_eq!(reply.status, Some(400), "{head:?}: {}", reply.text);
        assert_eq!(
            reply.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{head:?}"
        );
        assert!(
            reply.body().contains("\"code\":\"bad-request\""),
            "{}",
            reply.text
        );
    }
    assert_eq!(upstream.total(), 0);

    let tcp = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut h2 = h2.ready().await.unwrap();
    for (authority, host) in [("user@evil", None), ("gw", Some("a b"))] {
        let mut request = http::Request::get(format!("http://{authority}/echo"));
        if let Some(host) = host {
            request = request.header("host", host);
        }
        let (answer, _) = h2.send_request(request.body(()).unwrap(), true).unwrap();
        let answer = answer.await.unwrap();
        assert_eq!(answer.status(), 400, "{authority} {host:?}");
        h2 = h2.ready().await.unwrap();
    }
    assert_eq!(upstream.total(), 0);

    let client = gateway.client();
    for host in [
        "gw",
        "gw:8080",
        "[::1]:8443",
        "127.0.0.1",
        "[v1.x]",
        "a%2Db",
    ] {
        let reply = client.send("GET", "/echo", &[("host", host)], "").await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.text());
        assert_eq!(reply.json()["headers"]["host"], host);
    }
}

/// A listener on `[::]` takes IPv4 clients too (Linux binds it dual-stack),
/// and the kernel gives their addresses IPv4-mapped (`::ffff:127.0.0.1`).
/// The upstream and the log are told the IPv4 address the client has, as a
/// listener on `0.0.0.0` would tell it: an allow-list of `127.0.0.1` or
/// `10.0.0.0/8` behind the gateway must match it. An IPv6 client's address
/// goes on bare (no brackets, no port), as `X-Forwarded-For` has it.
#[tokio::test]
async fn a_dual_stack_listener_forwards_an_ipv4_client_as_ipv4() {
    let dir = TestDir::new("dual-stack");
    let upstream = MockUpstream::start().await;
    let at = |port: std::net::SocketAddr| std::net::SocketAddr::from(([0u16; 8], port.port()));
    let (listen, admin) = (
        at(common::gateway::free_port()),
        at(common::gateway::free_port()),
    );
    let gateway = GatewayProcess::start_at(
        &dir,
        &upstream.url(),
        &config().admin_token_env("DUAL_STACK_TOKEN"),
        (listen, admin),
        &[("DUAL_STACK_TOKEN", "a-token-of-enough-length")],
    )
    .unwrap();
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], listen.port()));
    let v6 = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, listen.port()));
    for (client, hops, forwarded_for) in [
        (v4, None, "127.0.0.1"),
        (v4, Some("203.0.113.9"), "203.0.113.9, 127.0.0.1"),
        (v6, None, "::1"),
        (v6, Some("2001:db8::9"), "2001:db8::9, ::1"),
    ] {
        let headers: Vec<(&str, &str)> = hops.map(|h| ("x-forwarded-for", h)).into_iter().collect();
        let reply = Client::new(client).send("GET", "/echo", &headers, "").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let echo = reply.json();
        assert_eq!(
            echo["headers"]["x-forwarded-for"], forwarded_for,
            "{client}"
        );
    }

    let refused = Client::new(std::net::SocketAddr::from(([127, 0, 0, 1], admin.port())))
        .get("/admin/routes")
        .await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    let line = gateway
        .logged_line("admin request refused", Duration::from_secs(5))
        .await
        .expect("the refusal is logged");
    assert!(line.contains("client=127.0.0.1:"), "{line}");
}

/// A gateway on `[::]` (IPv4 and IPv6 clients alike), its log as `args`
/// choose.
async fn dual_stack(name: &str, args: &[&str]) -> (TestDir, MockUpstream, GatewayProcess) {
    let dir = TestDir::new(name);
    let upstream = MockUpstream::start().await;
    let at = |port: std::net::SocketAddr| std::net::SocketAddr::from(([0u16; 8], port.port()));
    let ports = (
        at(common::gateway::free_port()),
        at(common::gateway::free_port()),
    );
    let gateway =
        GatewayProcess::start_at_with_args(&dir, &upstream.url(), &config(), ports, &[], args)
            .unwrap();
    (dir, upstream, gateway)
}

/// `bytes` sent from a connection of our own to the gateway at `ip`:
/// the client's address (as the gateway sees it) and what came back.
async fn sent_from(
    gateway: &GatewayProcess,
    ip: std::net::IpAddr,
    bytes: &[u8],
) -> (std::net::SocketAddr, common::raw::RawReply) {
    let to = std::net::SocketAddr::new(ip, gateway.addr.port());
    let mut stream = tokio::net::TcpStream::connect(to).await.unwrap();
    let from = stream.local_addr().unwrap();
    stream.write_all(bytes).await.unwrap();
    let reply = common::raw::read_reply(&mut stream, Duration::from_secs(5)).await;
    (from, reply)
}

/// The request log names the client by the address and port of its
/// connection (`client=127.0.0.1:51234`, `client=[::1]:51234`), as an
/// access log's `$remote_addr` and a firewall's or a load balancer's log
/// name it; an IPv4 client of a dual-stack listener as IPv4. What a client
/// says in `X-Forwarded-For` is not taken for it. A head the parser
/// refuses has its client too.
#[tokio::test]
async fn the_request_line_names_the_client_address() {
    let (_dir, _upstream, gateway) = dual_stack("request-line-client", &[]).await;
    let v4 = std::net::IpAddr::from([127, 0, 0, 1]);
    let v6 = std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
    for (n, ip) in [v4, v6].into_iter().enumerate() {
        let id = format!("client-address-{n}");
        let request = format!(
            "GET /echo HTTP/1.1\r\nHost: gw\r\nX-Request-Id: {id}\r\n\
             X-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n"
        );
        let (from, reply) = sent_from(&gateway, ip, request.as_bytes()).await;
        assert_eq!(reply.status, Some(200), "{}", reply.text);
        let line = gateway
            .logged_line(&format!("request_id=\"{id}\""), Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no request line:\n{}", gateway.log_text()));
        assert!(line.contains(&format!(" client={from} ")), "{from}: {line}");
        assert!(!line.contains("203.0.113.9"), "{line}");
    }
    assert!(gateway.log_text().contains(" client=[::1]:"));

    let (from, reply) = sent_from(&gateway, v4, b"GET /echo HTTP/1.1\r\nHost\r\n\r\n").await;
    assert_eq!(reply.status, Some(400), "{}", reply.text);
    let line = gateway
        .logged_line(&format!(" client={from} "), Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("no line for the refused head:\n{}", gateway.log_text()));
    assert!(line.contains("status=400"), "{line}");
}

/// With `--log-format json` the client's address is the request line's
/// `client` field, a string as the text line shows it.
#[tokio::test]
async fn the_json_request_line_names_the_client_address() {
    let (_dir, _upstream, gateway) =
        dual_stack("request-line-client-json", &["--log-format", "json"]).await;
    for (n, ip) in [
        std::net::IpAddr::from([127, 0, 0, 1]),
        std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("client-address-json-{n}");
        let request = format!(
            "GET /echo HTTP/1.1\r\nHost: gw\r\nX-Request-Id: {id}\r\nConnection: close\r\n\r\n"
        );
        let (from, reply) = sent_from(&gateway, ip, request.as_bytes()).await;
        assert_eq!(reply.status, Some(200), "{}", reply.text);
        let line = gateway
            .logged_line(&format!("\"request_id\":\"{id}\""), Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no request line:\n{}", gateway.log_text()));
        let line: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(line["target"], "idemgate::gateway", "{line}");
        assert_eq!(line["fields"]["client"], from.to_string(), "{line}");
    }
}

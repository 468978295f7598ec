//! The gateway's connection to an `http2 = true` upstream: the `:authority`
//! it is sent, one connection for every request, and a new one once the
//! upstream has closed it.

mod common;
mod h2_soak;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::config::Config;
use common::{GatewayProcess, TestDir};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// An h2c upstream (prior knowledge) that answers each request with the
/// `:authority` and the `host` field it got, and counts its connections;
/// one with the query `hold` is answered once [`H2cUpstream::release`]d.
struct H2cUpstream {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    open: Arc<AtomicU64>,
    held: Arc<Hold>,
    /// Each new value makes every open connection send GOAWAY and close.
    goaway: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

/// Counts a connection as open while it lives.
struct Open(Arc<AtomicU64>);

/// The `hold` requests that arrived, and what lets them be answered.
#[derive(Default)]
struct Hold {
    arrived: AtomicU64,
    release: tokio::sync::Notify,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl H2cUpstream {
    /// On a port no outgoing connection takes, so it can restart on it.
    async fn start() -> Self {
        Self::serve(free_listener())
    }

    /// Again on the port it had; the bind is retried while the last
    /// connections' sockets still hold it.
    async fn start_on(addr: SocketAddr) -> Self {
        for _ in 0..100 {
            match TcpListener::bind(addr).await {
                Ok(listener) => return Self::serve(listener),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("binding {addr}: {e}"),
            }
        }
        panic!("{addr} still in use after 2 s");
    }

    fn serve(listener: TcpListener) -> Self {
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicU64::new(0));
        let held = Arc::new(Hold::default());
        let (goaway, _) = watch::channel(0);
        let (counted, opened, closer) = (accepted.clone(), open.clone(), goaway.clone());
        let hold = held.clone();
        let task = tokio::spawn(async move {
            // Held here, so that stopping the upstream closes every connection.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                opened.fetch_add(1, Ordering::SeqCst);
                let open = Open(opened.clone());
                let mut goaway = closer.subscribe();
                let hold = hold.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let hold = hold.clone();
                    async move {
                        if request.uri().query() == Some("hold") {
                            let released = hold.release.notified();
                            hold.arrived.fetch_add(1, Ordering::SeqCst);
                            released.await;
                        }
                        answer(request).await
                    }
                });
                connections.spawn(async move {
                    let _open = open;
                    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .timer(TokioTimer::new())
                        .serve_connection(TokioIo::new(stream), service);
                    let mut connection = std::pin::pin!(connection);
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        _ = goaway.changed() => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                });
            }
        });
        H2cUpstream {
            addr,
            accepted,
            open,
            held,
            goaway,
            task,
        }
    }

    fn open(&self) -> u64 {
        self.open.load(Ordering::SeqCst)
    }

    /// Waits until `n` `hold` requests have arrived.
    async fn holding(&self, n: u64) {
        wait_until(|| self.held.arrived.load(Ordering::SeqCst) == n).await;
    }

    /// Answers every `hold` request that has arrived.
    fn release(&self) {
        self.held.release.notify_waiters();
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Sends GOAWAY on every open connection and waits until they are closed.
    async fn go_away(&self) {
        self.goaway.send_modify(|n| *n += 1);
        wait_until(|| self.open.load(Ordering::SeqCst) == 0).await;
    }

    /// Closes the listener and every connection (no GOAWAY: the sockets go).
    async fn stop(self) -> SocketAddr {
        self.task.abort();
        let _ = self.task.await;
        self.addr
    }
}

/// `common::gateway::free_listener`, for tokio.
fn free_listener() -> TcpListener {
    let listener = common::gateway::free_listener();
    listener.set_nonblocking(true).unwrap();
    TcpListener::from_std(listener).unwrap()
}

async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 5 s");
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let doc = serde_json::json!({
        "version": format!("{:?}", request.version()),
        "authority": request.uri().authority().map(|a| a.to_string()),
        "host": request
            .headers()
            .get_all("host")
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>(),
    });
    let status = if request.method() == "POST" { 201 } else { 200 };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(doc.to_string())))
        .unwrap())
}

fn config(preserve_host: bool) -> Config {
    let config = Config::charges_and_rest()
        .with_upstream("api", |u| u.set("http2", true))
        .with_route("rest", |r| r.set("preserve_host", preserve_host));
    let text = config.toml();
    assert!(text.contains("http2 = true") && text.contains("preserve_host"));
    config
}

async fn setup(name: &str, preserve_host: bool) -> (TestDir, H2cUpstream, GatewayProcess) {
    let dir = TestDir::new(name);
    let upstream = H2cUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(preserve_host));
    (dir, upstream, gateway)
}

/// What the upstream saw of `host`: its `:authority` and its `host` fields.
fn seen(reply: &common::Reply) -> (serde_json::Value, serde_json::Value) {
    assert!(
        reply.status.is_success(),
        "{}: {}",
        reply.status,
        reply.text()
    );
    let doc = reply.json();
    assert_eq!(doc["version"], "HTTP/2.0");
    (doc["authority"].clone(), doc["host"].clone())
}

/// The gateway sent an HTTP/2 upstream its own authority
/// as `:authority` and the client's host in a `host` field beside it, which
/// RFC 9113 §8.3.1 says must not differ; a server that reads `:authority`
/// (hyper, Go) never saw the client's host, so `preserve_host` (the
/// default) did nothing over HTTP/2.
#[tokio::test]
async fn the_clients_host_is_the_authority_an_http2_upstream_gets() {
    let (_dir, gateway_upstream, gateway) = setup("h2-authority", true).await;
    let client = gateway.client();
    for host in ["shop.example", "shop.example:8080", "127.0.0.1:9"] {
        let reply = client.send("GET", "/x", &[("host", host)], "").await;
        let (authority, hosts) = seen(&reply);
        assert_eq!(authority, host);
        assert_eq!(hosts, serde_json::json!([]), "no host field beside it");
    }
    // A host the gateway lets pass but no URI authority can hold: sent as
    // before, the upstream's authority and the client's `host` field.
    let reply = client.send("GET", "/x", &[("host", "a%2Db")], "").await;
    let upstream_authority = serde_json::Value::from(gateway_upstream.addr.to_string());
    assert_eq!(
        seen(&reply),
        (upstream_authority, serde_json::json!(["a%2Db"]))
    );
    // A keyed request, the same.
    let reply = client
        .send(
            "POST",
            "/v1/charges",
            &[("host", "shop.example"), ("idempotency-key", "k1")],
            "{}",
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(seen(&reply), ("shop.example".into(), serde_json::json!([])));

    // From an HTTP/2 client, its `:authority`, and no `host` field beside
    // it (one that names another host is refused: tests/bad_input.rs).
    let tcp = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut h2 = h2.ready().await.unwrap();
    let request = http::Request::get("http://shop.example:8443/x")
        .header("host", "SHOP.example:8443")
        .body(())
        .unwrap();
    let (answer, _) = h2.send_request(request, true).unwrap();
    let answer = answer.await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut body = answer.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["authority"], "shop.example:8443");
    assert_eq!(doc["host"], serde_json::json!([]));
}

#[tokio::test]
async fn without_preserve_host_an_http2_upstream_gets_its_own_authority() {
    let (_dir, upstream, gateway) = setup("h2-own-authority", false).await;
    let reply = gateway
        .client()
        .send("GET", "/x", &[("host", "shop.example")], "")
        .await;
    let (authority, hosts) = seen(&reply);
    assert_eq!(authority, upstream.addr.to_string());
    assert_eq!(hosts, serde_json::json!([]));
}

/// An upstream at an IPv6 address (`http://[::1]:P`) is dialed there, and
/// its authority goes as `:authority` in brackets, as a client's IPv6 host
/// goes: `[::1]:P`, never `::1:P`, which no URI holds.
#[tokio::test]
async fn an_http2_upstream_at_an_ipv6_address_gets_a_bracketed_authority() {
    let dir = TestDir::new("h2-ipv6");
    let upstream = H2cUpstream::start_on("[::1]:0".parse().unwrap()).await;
    assert!(
        upstream.url().starts_with("http://[::1]:"),
        "{}",
        upstream.url()
    );
    let template = config(true).with_route("charges", |r| r.set("preserve_host", false));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &template);
    let client = gateway.client();
    let reply = client
        .send(
            "POST",
            "/v1/charges",
            &[("host", "[2001:db8::1]:8443"), ("idempotency-key", "k1")],
            "{}",
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let own = serde_json::Value::from(upstream.addr.to_string());
    assert_eq!(seen(&reply), (own, serde_json::json!([])));
    for host in ["[2001:db8::1]:8443", "[::1]", "[v1.x]"] {
        let reply = client.send("GET", "/x", &[("host", host)], "").await;
        assert_eq!(seen(&reply), (host.into(), serde_json::json!([])), "{host}");
    }
}

/// One connection carries every request, one after another and many at once.
#[tokio::test(flavor = "multi_thread")]
async fn every_request_shares_one_connection() {
    let (_dir, upstream, gateway) = setup("h2-one-connection", true).await;
    // The first ones all at once: they wait for the one connect.
    let client = gateway.client();
    let burst = |n: usize| {
        let client = client.clone();
        futures_util::future::join_all((0..n).map(move |i| {
            let client = client.clone();
            async move {
                let host = format!("tenant{i}.example");
                let reply = client.send("GET", "/x", &[("host", &host)], "").await;
                assert_eq!(seen(&reply).0, host.as_str());
            }
        }))
    };
    burst(50).await;
    for _ in 0..20 {
        assert!(client.get("/x").await.status.is_success());
    }
    burst(50).await;
    assert_eq!(upstream.accepted(), 1);
}

/// The one connection carried every request for as long as it lasted:
/// under steady load it never idled, so upstream instances added behind a
/// balancer or a DNS name got none of the traffic. After 1,000 requests
/// (as an HTTP/1 connection) the next one opens a new connection; the
/// 1,000th, still running on the old one then, gets its answer, and the
/// old connection closes once it has.
#[tokio::test]
async fn a_connection_is_replaced_after_a_thousand_requests() {
    let dir = TestDir::new("h2-worn");
    let upstream = H2cUpstream::start().await;
    let config = config(true).with_upstream("api", |u| u.set("timeout", "4s"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let client = gateway.client();
    for i in 0..999 {
        let reply = client.get(&format!("/things/{i}")).await;
        assert!(reply.status.is_success(), "{}", reply.text());
    }
    assert_eq!(upstream.accepted(), 1);
    let last = tokio::spawn({
        let client = client.clone();
        async move { client.post("/v1/charges?hold", Some("last"), "{}").await }
    });
    upstream.holding(1).await;
    for _ in 0..5 {
        assert!(client.get("/x").await.status.is_success());
    }
    assert_eq!(
        upstream.accepted(),
        2,
        "the 1,001st opened a new connection"
    );
    assert_eq!(
        upstream.open(),
        2,
        "the old one is open while its stream runs"
    );
    upstream.release();
    let last = last.await.unwrap();
    assert_eq!(last.status, 201, "{}", last.text());
    assert_eq!(last.header("idempotent-replayed"), Some("false"));
    wait_until(|| upstream.open() == 1).await;
    assert!(client.get("/x").await.status.is_success());
    assert_eq!(upstream.accepted(), 2);
}

/// The upstream says GOAWAY (a graceful restart, a server's connection
/// limit): the next request gets a new connection, not the closed one.
#[tokio::test]
async fn after_a_goaway_the_next_request_opens_a_new_connection() {
    let (_dir, upstream, gateway) = setup("h2-goaway", true).await;
    let client = gateway.client();
    assert!(client.get("/x").await.status.is_success());
    upstream.go_away().await;
    let reply = client.post("/v1/charges", Some("after-goaway"), "{}").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(upstream.accepted(), 2);
}

/// The upstream restarts on its port, its connections gone without a
/// GOAWAY: the next keyed request is sent on a new connection and answered,
/// never refused or stored as `outcome-unknown` for the dead one.
#[tokio::test]
async fn after_the_upstream_restarts_a_keyed_request_succeeds() {
    let (_dir, upstream, gateway) = setup("h2-restart", true).await;
    let client = gateway.client();
    assert!(client.get("/x").await.status.is_success());
    let addr = upstream.stop().await;
    // Time to see the connection close: a request sent on it before that
    // is lost with it (as with any client), which is not what this is about.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Down: nothing sent, the key freed.
    let refused = client.post("/v1/charges", Some("restart"), "{}").await;
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        refused.text().contains("upstream-unreachable"),
        "{}",
        refused.text()
    );

    let upstream = H2cUpstream::start_on(addr).await;
    let first = client.post("/v1/charges", Some("restart"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let replay = client.post("/v1/charges", Some("restart"), "{}").await;
    assert_eq!(replay.status, 201, "{}", replay.text());
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.accepted(), 1);
}

/// Answers a stream 201 `{"ok":true}`, as the upstreams here do.
fn created(respond: &mut h2::server::SendResponse<Bytes>) {
    let head = Response::builder().status(201).body(()).unwrap();
    if let Ok(mut body) = respond.send_response(head, false) {
        let _ = body.send_data(Bytes::from_static(b"{\"ok\":true}"), true);
    }
}

/// An h2c upstream that resets its first `refuse` streams with
/// `REFUSED_STREAM` (a server at its limit does) and answers the rest 201;
/// counts the streams it answered.
async fn refusing_upstream(refuse: u64) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (answered, seen) = (counted.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    if seen.fetch_add(1, Ordering::SeqCst) < refuse {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    answered.fetch_add(1, Ordering::SeqCst);
                    created(&mut respond);
                }
            });
        }
    });
    (addr, answered)
}

/// An HTTP/2 upstream named by a host name that does not resolve (RFC 6761
/// `.invalid`): 502 `upstream-unreachable`, the key freed, and the log line
/// names the host and says it did not resolve, as for an HTTP/1 upstream.
#[tokio::test]
async fn an_upstream_name_that_does_not_resolve_is_502_and_the_log_names_the_host() {
    let dir = TestDir::new("h2-no-name");
    let gateway =
        GatewayProcess::start(&dir, "http://no-such-upstream.invalid:8080", &config(true));
    let client = gateway.client();
    for _ in 0..2 {
        let keyed = client.post("/v1/charges", Some("no-name"), "{}").await;
        assert_problem(&keyed, 502, "upstream-unreachable");
    }
    assert_problem(&client.get("/x").await, 502, "upstream-unreachable");
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

/// A stream the upstream reset with `REFUSED_STREAM` was
/// taken for a broken exchange, its key stored as `outcome-unknown`, so a
/// retry was refused for a request the upstream never processed. It is
/// "nothing was sent": 502 `upstream-unreachable` and the key freed, so the
/// retry runs it.
#[tokio::test]
async fn a_refused_stream_frees_the_key_for_the_retry() {
    let dir = TestDir::new("h2-refused-stream");
    // Each request is refused twice: the first time and its one retry.
    let (addr, answered) = refusing_upstream(4).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();

    let refused = client.post("/v1/charges", Some("refused"), "{}").await;
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        refused.text().contains("upstream-unreachable"),
        "{}",
        refused.text()
    );
    // On a pass-through route, the same: nothing was sent.
    let passed = client.get("/x").await;
    assert_eq!(passed.status, 502, "{}", passed.text());
    assert!(
        passed.text().contains("upstream-unreachable"),
        "{}",
        passed.text()
    );

    let retry = client.post("/v1/charges", Some("refused"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    let replay = client.post("/v1/charges", Some("refused"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(answered.load(Ordering::SeqCst), 1);
}

/// A stream refused with `REFUSED_STREAM` goes once more on the same
/// connection: an upstream allowing fewer streams than the 100 h2 assumes
/// refuses those past its limit in a burst that meets a new connection
/// before its SETTINGS, and once they are read h2 holds the retry until the
/// limit lets it open. It got 502 though the upstream would have run it.
#[tokio::test]
async fn a_refused_stream_goes_once_more() {
    let dir = TestDir::new("h2-refused-once");
    let (addr, answered) = refusing_upstream(1).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();

    let created = client
        .post("/v1/charges", Some("refused-once"), "{\"a\":1}")
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.header("idempotent-replayed"), Some("false"));
    let replay = client
        .post("/v1/charges", Some("refused-once"), "{\"a\":1}")
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(answered.load(Ordering::SeqCst), 1);
}

/// An h2c upstream that allows `limit` streams at once from the first, as
/// a server counting its own streams does: it says so in its SETTINGS, and
/// resets a stream past it with `REFUSED_STREAM` even before the client has
/// read them. It starts each connection 100 ms late and takes 50 ms over
/// each answer. Counts the streams it answered.
async fn strict_upstream(limit: u32) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answered = counted.clone();
            tokio::spawn(async move {
                // Slow to start: the streams of a burst arrive before the
                // client has read its SETTINGS.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Ok(mut connection) = h2::server::Builder::new()
                    .max_concurrent_streams(limit)
                    .handshake::<_, Bytes>(stream)
                    .await
                else {
                    return;
                };
                let open = Arc::new(AtomicU64::new(0));
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    if open.fetch_add(1, Ordering::SeqCst) >= u64::from(limit) {
                        open.fetch_sub(1, Ordering::SeqCst);
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    let (open, answered) = (open.clone(), answered.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        answered.fetch_add(1, Ordering::SeqCst);
                        open.fetch_sub(1, Ordering::SeqCst);
                        created(&mut respond);
                    });
                }
            });
        }
    });
    (addr, answered)
}

/// A burst that meets the gateway's first connection to an upstream
/// allowing fewer streams than the 100 h2 assumes until the upstream's
/// SETTINGS are read: every request of it runs once. The streams past the
/// limit were refused, and got 502 though the upstream would have run them.
#[tokio::test]
async fn a_burst_on_a_first_connection_to_a_strict_upstream_all_runs() {
    let dir = TestDir::new("h2-strict-burst");
    let (addr, answered) = strict_upstream(2).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();

    let burst = (0..8).map(|i| {
        let client = client.clone();
        async move {
            client
                .post("/v1/charges", Some(&format!("burst-{i}")), "{}")
                .await
        }
    });
    for reply in futures_util::future::join_all(burst).await {
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    assert_eq!(answered.load(Ordering::SeqCst), 8);
}

/// An h2c upstream whose first `go_away` connections each answer their
/// first stream with GOAWAY naming no stream processed (last stream 0, as a
/// server that reached its request limit or is shutting down does when a
/// stream crosses its GOAWAY), then close; later connections answer 201.
/// Counts the streams it answered.
async fn going_away_upstream(go_away: u64) -> (SocketAddr, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        let mut accepted = 0;
        while let Ok((mut stream, _)) = listener.accept().await {
            accepted += 1;
            let answered = counted.clone();
            if accepted <= go_away {
                tokio::spawn(async move {
                    // Our SETTINGS; then the client's preface and frames,
                    // up to its first HEADERS (a frame is a 9-byte header:
                    // length, type, flags, stream).
                    let _ = stream.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
                    let mut buf = Vec::new();
                    let mut at = 24;
                    loop {
                        while buf.len() >= at + 9 {
                            let length = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]);
                            let (kind, flags) = (buf[at + 3], buf[at + 4]);
                            if buf.len() < at + 9 + length as usize {
                                break;
                            }
                            at += 9 + length as usize;
                            if kind == 4 && flags & 1 == 0 {
                                let _ = stream.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).await;
                            }
                            if kind == 1 {
                                // GOAWAY: last stream 0, NO_ERROR.
                                let goaway = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
                                let _ = stream.write_all(&goaway).await;
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                return;
                            }
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((_request, mut respond))) = connection.accept().await {
                    answered.fetch_add(1, Ordering::SeqCst);
                    created(&mut respond);
                }
            });
        }
    });
    (addr, answered)
}

/// A stream above the last one an upstream's
/// GOAWAY named (an nginx at `keepalive_requests`, a server shutting down)
/// was taken for a broken exchange, and a keyed request's key was stored
/// as `outcome-unknown` for a request the upstream said it never
/// processed (RFC 9113 §6.8). It goes once more on a new connection.
#[tokio::test]
async fn a_stream_a_goaway_leaves_unprocessed_goes_once_more_on_a_new_connection() {
    let dir = TestDir::new("h2-goaway-unprocessed");
    let (addr, answered) = going_away_upstream(1).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();
    let first = client.post("/v1/charges", Some("unprocessed"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    let replay = client.post("/v1/charges", Some("unprocessed"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(answered.load(Ordering::SeqCst), 1);
}

/// Sent once more and left unprocessed again, or with a body too long to
/// keep for a second send: nothing was processed, so the key is freed
/// (502 `upstream-unreachable`) and the client's retry runs it.
#[tokio::test]
async fn a_request_left_unprocessed_twice_or_too_long_to_keep_frees_its_key() {
    let dir = TestDir::new("h2-goaway-twice");
    let (addr, answered) = going_away_upstream(3).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();
    let refused = client.post("/v1/charges", Some("twice"), "{}").await;
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        refused.text().contains("upstream-unreachable"),
        "{}",
        refused.text()
    );
    // Over 16 KiB: not kept, so not sent again.
    let long = format!("{{\"pad\":\"{}\"}}", "x".repeat(20 << 10));
    let refused = client.post("/v1/charges", Some("long"), &long).await;
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        refused.text().contains("upstream-unreachable"),
        "{}",
        refused.text()
    );
    for (key, body) in [("twice", "{}".to_owned()), ("long", long)] {
        let retry = client.post("/v1/charges", Some(key), &body).await;
        assert_eq!(retry.status, 201, "{key}: {}", retry.text());
        assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    }
    assert_eq!(answered.load(Ordering::SeqCst), 2);
}

/// An h2c upstream that answers every request 204 with a `content-length`
/// of 5, as some frameworks do; counts them.
async fn no_content_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    fixed_upstream(|| {
        Response::builder()
            .status(204)
            .header("content-length", "5")
            .body(())
            .unwrap()
    })
    .await
}

/// An h2c upstream that hands every request's stream to `answer`; counts
/// the requests.
async fn h2c_upstream<F>(answer: F) -> (SocketAddr, Arc<AtomicU64>)
where
    F: Fn(h2::server::SendResponse<Bytes>) + Clone + Send + Sync + 'static,
{
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (answered, answer) = (counted.clone(), answer.clone());
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((_request, respond))) = connection.accept().await {
                    answered.fetch_add(1, Ordering::SeqCst);
                    answer(respond);
                }
            });
        }
    });
    (addr, answered)
}

/// An h2c upstream that answers every request with `head` and, unless it
/// is a 204, the body `ok`; counts them.
async fn fixed_upstream(head: fn() -> Response<()>) -> (SocketAddr, Arc<AtomicU64>) {
    h2c_upstream(move |mut respond| {
        let head = head();
        let bodiless = head.status() == 204;
        if let Ok(mut body) = respond.send_response(head, bodiless)
            && !bodiless
        {
            let _ = body.send_data(Bytes::from_static(b"ok"), true);
        }
    })
    .await
}

/// An HTTP/2 upstream's 204 with a
/// `content-length` was passed on with it, and an HTTP/2 client (curl)
/// reset the stream instead of taking the answer (RFC 9110 §8.6: a 204
/// has none). It is dropped, fresh and in what is stored, as it is from an
/// HTTP/1 upstream.
#[tokio::test]
async fn a_204_from_an_http2_upstream_has_no_length() {
    let dir = TestDir::new("h2-204-length");
    let (addr, answered) = no_content_upstream().await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let h2 = common::Client::h2c(gateway.addr);
    let passed = h2.get("/x").await;
    assert_eq!(passed.status, 204);
    assert_eq!(passed.header("content-length"), None);
    for replayed in ["false", "true"] {
        let reply = h2.post("/v1/charges", Some("no-content"), "{}").await;
        assert_eq!(reply.status, 204, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
        assert_eq!(reply.header("content-length"), None, "{replayed}");
    }
    assert_eq!(answered.load(Ordering::SeqCst), 2);
}

/// An HTTP/2 upstream's field named like a
/// framing field (`transfer_encoding`, `content__length`) was passed on to
/// HTTP/1 clients, where a proxy in front of the gateway that folds `_`
/// into `-` reads a second framing; an HTTP/1 upstream's is dropped
/// (docs/http1.md). Other names with `_` pass.
#[tokio::test]
async fn framing_look_alikes_from_an_http2_upstream_are_dropped() {
    let dir = TestDir::new("h2-look-alikes");
    let (addr, _) = fixed_upstream(|| {
        Response::builder()
            .status(200)
            .header("transfer_encoding", "chunked")
            .header("content__length", "9")
            .header("x_api_key", "k")
            .header("content-length", "2")
            .body(())
            .unwrap()
    })
    .await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let request = b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n";
    let reply = common::raw::exchange(gateway.addr, request, Duration::from_secs(3)).await;
    assert_eq!(reply.status, Some(200), "{}", reply.text);
    assert_eq!(reply.header("transfer_encoding"), None, "{}", reply.text);
    assert_eq!(reply.header("content__length"), None, "{}", reply.text);
    assert_eq!(reply.header("x_api_key").as_deref(), Some("k"));
    assert_eq!(reply.body(), "ok");
    for _ in 0..2 {
        let keyed = gateway
            .client()
            .post("/v1/charges", Some("look-alike"), "{}")
            .await;
        assert_eq!(keyed.status, 200, "{}", keyed.text());
        assert_eq!(keyed.header("transfer_encoding"), None);
        assert_eq!(keyed.header("content__length"), None);
    }
}

/// An HTTP/2 upstream's answer with a head past 16 KiB (a long policy, many
/// cookies) was taken for a broken exchange and stored as 502
/// outcome-unknown, while the same answer from an HTTP/1 upstream is read
/// whole (up to 417,792 bytes): the HTTP/2 client reads as large a head.
#[tokio::test]
async fn a_large_answer_head_from_an_http2_upstream_is_read_and_replayed() {
    let dir = TestDir::new("h2-large-head");
    let (addr, answered) = fixed_upstream(|| {
        Response::builder()
            .status(201)
            .header("content-security-policy", "a".repeat(100_000))
            .header("content-length", "2")
            .body(())
            .unwrap()
    })
    .await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    for replayed in ["false", "true"] {
        let reply = gateway
            .client()
            .post("/v1/charges", Some("large-head"), "{}")
            .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
        let policy = reply.header("content-security-policy").unwrap_or_default();
        assert_eq!(policy.len(), 100_000, "{replayed}");
        assert_eq!(&reply.body[..], b"ok", "{replayed}");
    }
    assert_eq!(answered.load(Ordering::SeqCst), 1);
}

/// What [`one_stream_upstream`] has seen: streams that reached it, and
/// those it answered 201.
struct Seen {
    arrived: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

/// An h2c upstream that allows one stream at a time
/// (`SETTINGS_MAX_CONCURRENT_STREAMS = 1`, as a server at its limit is):
/// `?hold` is never answered, `/slow` answers at once and sends its body a
/// piece every 100 ms for 2 s, any other is answered 201.
async fn one_stream_upstream() -> (SocketAddr, Seen) {
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let seen = Seen {
        arrived: Arc::new(AtomicU64::new(0)),
        answered: Arc::new(AtomicU64::new(0)),
    };
    let (arrived, answered) = (seen.arrived.clone(), seen.answered.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (arrived, answered) = (arrived.clone(), answered.clone());
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::Builder::new()
                    .max_concurrent_streams(1)
                    .handshake::<_, Bytes>(stream)
                    .await
                else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let answered = answered.clone();
                    tokio::spawn(async move {
                        if request.uri().query() == Some("hold") {
                            tokio::time::sleep(Duration::from_secs(10)).await;
                            drop(respond);
                        } else if request.uri().path() == "/slow" {
                            let head = Response::builder().status(200).body(()).unwrap();
                            let Ok(mut body) = respond.send_response(head, false) else {
                                return;
                            };
                            for _ in 0..20 {
                                let _ = body.send_data(Bytes::from_static(b"."), false);
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            let _ = body.send_data(Bytes::new(), true);
                        } else {
                            answered.fetch_add(1, Ordering::SeqCst);
                            created(&mut respond);
                        }
                    });
                }
            });
        }
    });
    (addr, seen)
}

/// [`config`], waiting at most 300 ms for a connection or a stream: less
/// than the upstream `timeout` of 1 s.
fn one_stream_config() -> Config {
    config(true).with_upstream("api", |u| u.set("connect_timeout", "300ms"))
}

fn assert_problem(reply: &common::Reply, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.json()["code"], code, "{}", reply.text());
}

/// Past an HTTP/2 upstream's stream limit a request waited
/// inside hyper's connection, never sent; one still waiting when its
/// `timeout` ended was answered 504 `outcome-unknown` and that was stored,
/// so every retry of its key replayed it. The gateway now counts the
/// streams in flight against the limit the upstream announced, and hands
/// hyper no request it would hold back: one that waits for a stream past
/// `connect_timeout` was never sent (502, key freed), as one waiting for an
/// HTTP/1 connection is. The one the upstream took and never answered is
/// still `outcome-unknown`.
#[tokio::test]
async fn a_request_waiting_for_a_stream_is_not_sent_and_its_key_is_freed() {
    let dir = TestDir::new("h2-stream-limit");
    let (addr, seen) = one_stream_upstream().await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &one_stream_config());
    let client = gateway.client();

    let held = tokio::spawn({
        let client = client.clone();
        async move { client.post("/v1/charges?hold", Some("held"), "{}").await }
    });
    wait_until(|| seen.arrived.load(Ordering::SeqCst) == 1).await;
    let waited = client.post("/v1/charges", Some("waited"), "{}").await;
    assert_problem(&waited, 502, "upstream-unreachable");
    assert_eq!(seen.arrived.load(Ordering::SeqCst), 1, "never sent");

    let held = held.await.unwrap();
    assert_problem(&held, 504, "outcome-unknown");
    let again = client.post("/v1/charges?hold", Some("held"), "{}").await;
    assert_problem(&again, 504, "outcome-unknown");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let retry = client.post("/v1/charges", Some("waited"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert_eq!(seen.answered.load(Ordering::SeqCst), 1);
}

/// The same behind a stream that stays open longer than the `timeout` (a
/// pass-through answer still streaming): the keyed request behind it was
/// stored as `outcome-unknown` though the upstream never saw it.
#[tokio::test]
async fn a_request_behind_a_long_stream_is_not_stored_as_outcome_unknown() {
    let dir = TestDir::new("h2-stream-limit-long");
    let (addr, seen) = one_stream_upstream().await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &one_stream_config());
    let client = gateway.client();

    let slow = tokio::spawn({
        let client = client.clone();
        async move { client.get("/slow").await }
    });
    wait_until(|| seen.arrived.load(Ordering::SeqCst) == 1).await;
    let waited = client.post("/v1/charges", Some("behind"), "{}").await;
    assert_problem(&waited, 502, "upstream-unreachable");

    let slow = slow.await.unwrap();
    assert_eq!(slow.status, 200);
    assert_eq!(slow.text(), ".".repeat(20));
    let retry = client.post("/v1/charges", Some("behind"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert_eq!(seen.answered.load(Ordering::SeqCst), 1);
}

/// A keyed request still waiting for a stream (the upstream allows one,
/// held) when the shutdown's grace ends was never handed to the
/// connection: its key is freed (502 `upstream-unreachable`), and its
/// retry after the restart runs it, once. The held one was sent: still
/// outcome-unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_a_stream_when_the_grace_ends_frees_its_key() {
    let dir = TestDir::new("h2-stream-limit-cut-off");
    let (addr, seen) = one_stream_upstream().await;
    let config = config(true)
        .server("shutdown_grace", "500ms")
        .defaults("lock_timeout", "25s")
        .with_upstream("api", |u| {
            u.set("connect_timeout", "10s").set("timeout", "20s")
        });
    let mut gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config);
    let client = gateway.client();

    let held = tokio::spawn({
        let client = client.clone();
        async move { client.post("/v1/charges?hold", Some("held"), "{}").await }
    });
    wait_until(|| seen.arrived.load(Ordering::SeqCst) == 1).await;
    let waiting =
        tokio::spawn(async move { client.post("/v1/charges", Some("waited"), "{}").await });
    gateway.until_inflight(2).await;
    gateway.signal("TERM");
    let waiting = waiting.await.unwrap();
    assert_problem(&waiting, 502, "upstream-unreachable");
    assert!(
        waiting.text().contains("shut down before"),
        "{}",
        waiting.text()
    );
    assert_problem(&held.await.unwrap(), 504, "outcome-unknown");
    let status = tokio::task::block_in_place(|| gateway.wait_exit(Duration::from_secs(5)));
    assert!(status.success(), "{status}");
    assert_eq!(seen.arrived.load(Ordering::SeqCst), 1, "never sent");

    gateway.restart();
    let client = gateway.client();
    let retry = client.post("/v1/charges", Some("waited"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert_eq!(seen.answered.load(Ordering::SeqCst), 1);
    let again = client.post("/v1/charges?hold", Some("held"), "{}").await;
    assert_problem(&again, 504, "outcome-unknown");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

/// An h2c upstream that answers every request 200 with `part` of its body
/// and then resets the stream with `NO_ERROR`, never ending it; with a
/// `content-length` of 20 when `declared`. Counts the requests.
async fn cutting_upstream(declared: bool) -> (SocketAddr, Arc<AtomicU64>) {
    h2c_upstream(move |mut respond| {
        let mut head = Response::builder().status(200);
        if declared {
            head = head.header("content-length", "20");
        }
        let Ok(mut body) = respond.send_response(head.body(()).unwrap(), false) else {
            return;
        };
        let _ = body.send_data(Bytes::from_static(b"part"), false);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            body.send_reset(h2::Reason::NO_ERROR);
        });
    })
    .await
}

/// An HTTP/2 upstream that cut its answer short
/// with `RST_STREAM(NO_ERROR)` (which RFC 9113 §8.1 allows only after a
/// whole answer) had the cut taken for the end of the body, as hyper ends
/// a body on that code: a keyed route stored the part as the whole answer
/// and replayed it. An answer with a declared length that ends short is
/// broken, as one from an HTTP/1 upstream is: `outcome-unknown`, and a
/// client's stream or connection cut, never a clean end.
#[tokio::test]
async fn an_http2_answer_cut_short_by_a_no_error_reset_is_not_whole() {
    let dir = TestDir::new("h2-cut-no-error");
    let (addr, answered) = cutting_upstream(true).await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    for replayed in ["false", "true"] {
        let reply = gateway
            .client()
            .post("/v1/charges", Some("cut-1"), "{}")
            .await;
        assert_eq!(reply.status, 502, "{replayed}: {}", reply.text());
        assert_eq!(reply.json()["code"], "outcome-unknown");
        assert_eq!(reply.header("idempotent-replayed"), Some(replayed));
    }
    assert_eq!(answered.load(Ordering::SeqCst), 1, "run once");
    // Passed through: 502 while the head is still unsent, else the
    // client's connection cut; never the part as a whole answer.
    let reply = common::raw::exchange(
        gateway.addr,
        b"GET /things HTTP/1.1\r\nHost: gw\r\n\r\n",
        Duration::from_secs(3),
    )
    .await;
    match reply.status {
        Some(502) => assert!(reply.body().contains("upstream-error"), "{}", reply.text),
        _ => assert!(
            reply.closed && !reply.text.ends_with("part"),
            "{}",
            reply.text
        ),
    }
    let mut h2 = common::h2::connect(gateway.addr).await;
    let answer = common::h2::send(
        &mut h2,
        http::Request::get(format!("http://{}/things", gateway.addr))
            .body(())
            .unwrap(),
    )
    .await;
    if answer.status() == 200 {
        let mut body = answer.into_body();
        let mut failed = false;
        while let Some(chunk) = body.data().await {
            failed |= chunk.is_err();
        }
        assert!(failed, "the part ended as a whole answer");
    } else {
        assert_eq!(answer.status(), 502);
    }
}

/// A length with no body behind it by definition (the answer to HEAD, a
/// 304) is not an answer cut short.
#[tokio::test]
async fn an_http2_answer_with_a_length_and_no_body_by_definition_ends() {
    let dir = TestDir::new("h2-bodiless-length");
    // Every answer is a head alone: 304 to a GET, 200 to HEAD.
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let status = if request.method() == "HEAD" { 200 } else { 304 };
                    let head = Response::builder()
                        .status(status)
                        .header("content-length", "20")
                        .body(())
                        .unwrap();
                    let _ = respond.send_response(head, true);
                }
            });
        }
    });
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    for client in [gateway.client(), common::Client::h2c(gateway.addr)] {
        for (method, status) in [("HEAD", 200), ("GET", 304)] {
            let reply = client.send(method, "/things", &[], Bytes::new()).await;
            assert_eq!(reply.status, status, "{method}");
            assert!(reply.body.is_empty());
            assert_eq!(reply.header("content-length"), Some("20"), "{method}");
        }
    }
}

/// An answer to HEAD has no body whatever follows its head (RFC 9110
/// §9.3.2). An HTTP/2 upstream that sends one anyway (hyper's server does,
/// the length of a GET's) broke the stream at the gateway's HTTP/2 client
/// (h2 refuses DATA past a HEAD answer's empty content) and the client got
/// 502: the answer's head is what a HEAD is for, and it is relayed, its
/// `Content-Length` as the upstream gave it, and the same for a GET after.
#[tokio::test]
async fn a_head_answered_with_a_body_anyway_by_an_http2_upstream_is_its_head() {
    let (_dir, _upstream, gateway) = setup("h2-head", true).await;
    let client = gateway.client();
    let head = client.send("HEAD", "/rest", &[], Bytes::new()).await;
    assert_eq!(head.status, 200, "{}", head.text());
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-type"), Some("application/json"));
    let get = client.get("/rest").await;
    assert_eq!(get.status, 200);
    assert_eq!(get.json()["version"], "HTTP/2.0");
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
}

/// An h2c upstream whose connection goes silent on a path ending `/silent`:
/// it stops reading and answering on it, the connection left open (a peer
/// gone without a FIN or a reset, a hung process), while new connections
/// are answered 201. Counts connections.
async fn silencing_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = free_listener();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicU64::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    if request.uri().path().ends_with("/silent") {
                        // Held, never polled again.
                        let _held = (connection, respond);
                        std::future::pending::<()>().await;
                        return;
                    }
                    created(&mut respond);
                }
            });
        }
    });
    (addr, connections)
}

/// An upstream connection that went silent
/// (no frame read on it for a request's whole `timeout`) was kept: every
/// request after was sent on it, never answered, and stored as a 504
/// `outcome-unknown`, while a new connection would have been answered. An
/// HTTP/1 connection whose request timed out is not used again; neither is
/// this one: the next request opens a new connection.
#[tokio::test]
async fn after_a_connection_goes_silent_the_next_request_opens_a_new_one() {
    let dir = TestDir::new("h2-silent");
    let (addr, connections) = silencing_upstream().await;
    let gateway = GatewayProcess::start(&dir, &format!("http://{addr}"), &config(true));
    let client = gateway.client();
    let first = client.post("/v1/charges", Some("before"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let silent = client
        .post("/v1/charges/silent", Some("silent"), "{}")
        .await;
    assert_problem(&silent, 504, "outcome-unknown");
    for key in ["after-1", "after-2"] {
        let reply = client.post("/v1/charges", Some(key), "{}").await;
        assert_eq!(reply.status, 201, "{key}: {}", reply.text());
        assert_eq!(reply.header("idempotent-replayed"), Some("false"));
    }
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

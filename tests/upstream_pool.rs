//! The gateway's connections to an HTTP/1 upstream: reused, bounded by
//! `max_connections`, and never a dead one.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::config::Config;
use common::{GatewayProcess, MockUpstream, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The proxy tests' config with a pool of two connections, a short wait for
/// a free one, and room for the longer upstream timeout.
fn config() -> Config {
    let config = Config::charges_and_rest()
        .with_upstream("api", |u| {
            u.timeout("5s")
                .set("connect_timeout", "300ms")
                .set("max_connections", 2)
        })
        .defaults("lock_timeout", "10s");
    let text = config.toml();
    assert!(text.contains("max_connections = 2") && text.contains("lock_timeout = \"10s\""));
    config
}

async fn setup(name: &str) -> (TestDir, MockUpstream, GatewayProcess) {
    GatewayProcess::start_fresh(name, &config()).await
}

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let (_dir, upstream, gateway) = setup("pool-reuse").await;
    let client = gateway.client();
    for i in 0..20 {
        let reply = client.get(&format!("/things/{i}")).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    // Answers without a body end as soon as their head is read.
    for i in 0..5 {
        let no_content = client.get(&format!("/things/{i}?status=204")).await;
        assert_eq!(no_content.status, 204);
        let head = client.send("HEAD", &format!("/things/{i}"), &[], "").await;
        assert_eq!(head.status, 201);
    }
    let (opened, _) = upstream.connections();
    assert_eq!(
        opened, 1,
        "every request after the first reuses the connection"
    );
}

/// A kept connection carries at most 1,000 requests, as nginx's
/// `keepalive_requests`: under steady load it never idles, and upstream
/// instances added behind a balancer (a Kubernetes Service, a DNS name)
/// would get no share of what the open connections carry.
#[tokio::test]
async fn a_connection_is_replaced_after_a_thousand_requests() {
    let (_dir, upstream, gateway) = setup("pool-worn").await;
    let client = gateway.client();
    for i in 0..1_001 {
        let reply = client.get(&format!("/things/{i}")).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let (opened, most_open) = upstream.connections();
    assert_eq!(opened, 2, "the 1,001st request goes on a new connection");
    assert_eq!(
        most_open, 1,
        "the first closed once its last answer was read"
    );
}

/// `keep_alive = false`: one request per connection, for an upstream that
/// cannot be trusted to keep a connection's answers in step with its
/// requests. Each request says `Connection: close`, and each answer ends
/// its connection: nothing is left open to take a stray answer.
#[tokio::test]
async fn without_keep_alive_each_request_has_a_connection_of_its_own() {
    let config = config().with_upstream("api", |u| u.set("keep_alive", false));
    assert!(config.toml().contains("keep_alive = false"));
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh("pool-no-reuse", &config).await;
    let client = gateway.client();
    for i in 0..5 {
        let reply = client.get(&format!("/things/{i}")).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        let keyed = client
            .post("/v1/charges", Some(&format!("k{i}")), "{}")
            .await;
        assert_eq!(keyed.status, 201, "{}", keyed.text());
    }
    let (opened, most_open) = upstream.connections();
    assert_eq!(opened, 10, "a connection per request");
    assert_eq!(most_open, 1, "each closed before the next");
}

#[tokio::test]
async fn an_answer_abandoned_midway_gives_its_connection_slot_back() {
    let (_dir, upstream, gateway) = setup("pool-abandoned").await;
    // Two clients (max_connections = 2) each read the head of a 64 MiB answer
    // and hang up: their connections cannot be reused, but their slots must
    // come back, or the next request would wait for a slot and get 502.
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
        stream
            .write_all(b"GET /big?bytes=67108864 HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 512];
        let n = stream.read(&mut head).await.unwrap();
        let text = String::from_utf8_lossy(&head[..n]);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        drop(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = gateway.client();
    for i in 0..4 {
        let reply = client.get(&format!("/after/{i}")).await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let (_, most_open) = upstream.connections();
    assert!(most_open <= 2, "{most_open} connections were open at once");
}

#[tokio::test]
async fn concurrent_requests_wait_for_one_of_max_connections() {
    let (_dir, upstream, gateway) = setup("pool-bound").await;
    let client = gateway.client();
    // Six requests of 100 ms on two connections: three rounds, all well
    // within connect_timeout (300 ms) of waiting each.
    let replies = futures_util::future::join_all((0..6).map(|i| {
        let client = client.clone();
        async move { client.get(&format!("/slow/{i}?delay_ms=100")).await }
    }))
    .await;
    for reply in &replies {
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let (opened, most_open) = upstream.connections();
    assert!(most_open <= 2, "{most_open} connections were open at once");
    assert!(opened <= 2, "{opened} connections were opened");
    assert_eq!(upstream.total(), 6);
}

#[tokio::test]
async fn no_free_connection_in_time_is_502_and_frees_the_key() {
    let (_dir, upstream, gateway) = setup("pool-wait").await;
    let client = gateway.client();
    // Both connections busy for 1.5 s; waiting is bounded by connect_timeout.
    let busy: Vec<_> = (0..2)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { client.get(&format!("/busy/{i}?delay_ms=1500")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let reply = client.post("/v1/charges", Some("k-wait"), "{}").await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["code"], "upstream-unreachable");
    assert_eq!(upstream.executions("k-wait"), 0, "nothing was sent");

    for task in busy {
        assert_eq!(task.await.unwrap().status, 201);
    }
    // Nothing was sent, so the key was freed: the retry runs.
    let retry = client.post("/v1/charges", Some("k-wait"), "{}").await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("k-wait"), 1);
}

/// An upstream that answers each connection's first request with keep-alive
/// and then closes the connection, as an upstream whose idle timeout is
/// shorter than the gateway's does.
async fn closing_upstream() -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
                // Closed without `Connection: close`.
            });
        }
    });
    (url, accepted)
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used() {
    let dir = TestDir::new("pool-stale");
    let (url, accepted) = closing_upstream().await;
    let gateway = GatewayProcess::start(&dir, &url, &config());
    let client = gateway.client();
    for i in 0..3 {
        let reply = client.get(&format!("/things/{i}")).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
        assert_eq!(reply.text(), "ok");
        // Let the gateway see the close before the next request.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

/// An upstream that answers each connection's first request with keep-alive,
/// then reads the next request on it and closes without a word: what an
/// upstream's keep-alive close crossing the gateway's request looks like
/// from the gateway. Counts connections and the request lines it read.
async fn upstream_closing_on_the_second_request()
-> (String, Arc<AtomicU64>, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicU64::new(0));
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counted, seen) = (accepted.clone(), lines.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                for answered in [true, false] {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => head.push(buf[0]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    seen.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or("").to_owned());
                    if !answered {
                        return;
                    }
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    (url, accepted, lines)
}

#[tokio::test]
async fn an_idempotent_request_on_a_connection_closed_unanswered_goes_once_more() {
    let dir = TestDir::new("pool-closed-unanswered");
    let (url, accepted, lines) = upstream_closing_on_the_second_request().await;
    let gateway = GatewayProcess::start(&dir, &url, &config());
    let client = gateway.client();
    assert_eq!(client.get("/things/1").await.status, 200);
    // The second GET goes on the kept connection, which the upstream closes
    // having read it: it is sent again on a new connection and answered.
    let again = client.get("/things/2").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.text(), "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(
        *lines.lock().unwrap(),
        [
            "GET /things/1 HTTP/1.1",
            "GET /things/2 HTTP/1.1",
            "GET /things/2 HTTP/1.1"
        ]
    );

    // A POST is never sent twice: the upstream may have run it.
    let post = client
        .send(
            "POST",
            "/things",
            &[("content-type", "application/json")],
            "{}",
        )
        .await;
    assert_eq!(post.status, 502, "{}", post.text());
    assert_eq!(post.json()["code"], "upstream-error");
    let client = &client;
    let charge = |key: &'static str| async move {
        let headers = [
            ("content-type", "application/json"),
            ("idempotency-key", key),
        ];
        client.send("POST", "/v1/charges", &headers, "{}").await
    };
    // The new connection after the POST's answers the keyed POST first, so
    // it needs one more request on it to be closed unanswered.
    let keyed = charge("closed-1").await;
    assert_eq!(keyed.status, 200, "{}", keyed.text());
    let keyed = charge("closed-2").await;
    assert_eq!(keyed.status, 502, "{}", keyed.text());
    assert_eq!(keyed.json()["code"], "outcome-unknown");
    let posts = lines
        .lock()
        .unwrap()
        .iter()
        // A line may start with the body before it ("{}POST ..."), unread.
        .filter(|line| line.contains("POST /"))
        .count();
    assert_eq!(posts, 3, "each POST reached the upstream once");
}

#[tokio::test]
async fn a_tls_handshake_that_never_ends_is_bounded_by_connect_timeout() {
    // Accepts TCP connections and never answers the TLS ClientHello.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            sockets.push(stream);
        }
    });
    let dir = TestDir::new("pool-tls-hang");
    let gateway = GatewayProcess::start(&dir, &url, &config());
    let started = std::time::Instant::now();
    let reply = gateway
        .client()
        .post("/v1/charges", Some("k-tls"), "{}")
        .await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["code"], "upstream-unreachable");
    // connect_timeout is 300 ms; the upstream timeout (5 s) is not what ended it.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    held.abort();
}

/// `check` only asks that `lock_timeout` exceed the upstream `timeout`, so an
/// execution must end within `timeout` — time spent waiting for a free
/// connection included. It used to start the timeout once a connection was
/// had: a request that waited for one outlived its lease while its gateway
/// was alive, and a retry took the key over and ran it a second time.
#[tokio::test]
async fn waiting_for_a_connection_counts_against_the_timeout_so_the_lease_holds() {
    let config = Config::charges_and_rest().with_upstream("api", |u| {
        u.timeout("4s")
            .set("connect_timeout", "3s")
            .set("max_connections", 1)
    });
    let text = config.toml();
    assert!(text.contains("max_connections = 1") && text.contains("lock_timeout = \"5s\""));
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh("pool-lease", &config).await;
    let client = gateway.client();
    let started = std::time::Instant::now();
    // The one connection is busy for 2 s.
    let busy = {
        let client = client.clone();
        tokio::spawn(async move { client.get("/busy?delay_ms=2000").await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Waits ~1.9 s for the connection, then the upstream takes 3.5 s: past
    // the 4 s timeout counted from the send, so outcome unknown, recorded
    // before the 5 s lease runs out.
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=3500", Some("k-lease"), "{}")
                .await
        })
    };
    // After the lease: were the first still waiting, this retry would take
    // the key over and run it again.
    tokio::time::sleep(Duration::from_millis(5300).saturating_sub(started.elapsed())).await;
    let retry = client
        .post("/v1/charges?delay_ms=3500", Some("k-lease"), "{}")
        .await;
    let first = first.await.unwrap();
    assert_eq!(first.status, 504, "{}", first.text());
    assert_eq!(first.json()["code"], "outcome-unknown");
    assert_eq!(retry.status, 504, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(busy.await.unwrap().status, 201);
    assert_eq!(upstream.executions("k-lease"), 1);
}

/// An upstream whose first connection answers its first request and, 700 ms
/// after reading the second, closes without a word; every later connection
/// answers its request 700 ms after reading it. Counts the requests read.
async fn upstream_slow_to_close_then_slow_to_answer() -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            let answers_first = std::mem::take(&mut first);
            tokio::spawn(async move {
                for answered in [answers_first, false] {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => head.push(buf[0]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&head).to_lowercase();
                    let length = text
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut body = vec![0u8; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    if answered {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                        continue;
                    }
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    if !answers_first {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                    }
                    return;
                }
            });
        }
    });
    (url, requests)
}

/// An idempotent request sent again after its
/// kept-alive connection closed unanswered got a whole new `timeout` (and
/// `connect_timeout`) for the second try, so a keyed PUT could run to twice
/// its upstream's `timeout`, past a `lock_timeout` that `check` only asks
/// to exceed it once: a retry then took the key over while the gateway
/// still waited. The second try ends by the first one's deadline.
#[tokio::test]
async fn a_request_sent_again_ends_by_the_first_tries_deadline() {
    let config = Config::charges_and_rest()
        .with_upstream("api", |u| u.timeout("1s"))
        .defaults("lock_timeout", "2s")
        .with_route("charges", |r| r.set("methods", &["PUT"][..]));
    let text = config.toml();
    assert!(text.contains("methods = [\"PUT\"]"), "{text}");
    let dir = TestDir::new("pool-resend-deadline");
    let (url, requests) = upstream_slow_to_close_then_slow_to_answer().await;
    let gateway = GatewayProcess::start(&dir, &url, &config);
    let client = gateway.client();
    assert_eq!(client.get("/things").await.status, 200);
    let started = std::time::Instant::now();
    let put = client
        .send(
            "PUT",
            "/v1/charges/1",
            &[("idempotency-key", "resend-deadline")],
            "{}",
        )
        .await;
    let took = started.elapsed();
    assert_eq!(put.status, 504, "{}", put.text());
    assert_eq!(put.json()["code"], "outcome-unknown");
    assert!(took < Duration::from_millis(1350), "{took:?}");
    // Sent twice, as an idempotent method may be (RFC 9112 §9.3.1).
    assert_eq!(requests.load(Ordering::SeqCst), 3);
}

/// A reload that leaves an upstream as it was leaves its connections too:
/// requests after it go on the connection the ones before it used, rather
/// than each reload dropping every idle connection and dialing again.
#[tokio::test]
async fn a_reload_keeps_the_connections_of_an_upstream_it_leaves_alone() {
    for http2 in [false, true] {
        let config = config().with_upstream("api", |u| u.set("http2", http2));
        let name = format!("pool-reload-kept-{http2}");
        let (_dir, upstream, gateway) = GatewayProcess::start_fresh(&name, &config).await;
        let client = gateway.client();
        for i in 1..=5 {
            let reply = client.get(&format!("/things/{i}")).await;
            assert_eq!(reply.status, 201, "{}", reply.text());
            gateway.reload_by_signal(i).await;
        }
        let (opened, _) = upstream.connections();
        assert_eq!(opened, 1, "http2 = {http2}: {opened} connections opened");
    }
}

/// `max_connections` bounds the connections open to the upstream across
/// reloads too: requests that arrive after a reload share the pool of those
/// still running from before it, instead of each reload opening a pool (and
/// up to `max_connections` connections) of its own.
#[tokio::test]
async fn max_connections_holds_across_reloads() {
    let config = config().with_upstream("api", |u| u.set("connect_timeout", "4s"));
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh("pool-reload-bound", &config).await;
    let client = gateway.client();
    let mut requests = Vec::new();
    for i in 1..=6 {
        let client = client.clone();
        requests.push(tokio::spawn(async move {
            client.get(&format!("/slow/{i}?delay_ms=500")).await
        }));
        gateway.reload_by_signal(i).await;
    }
    for request in requests {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let (_, most_open) = upstream.connections();
    assert!(most_open <= 2, "{most_open} connections were open at once");
}

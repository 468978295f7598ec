//! A real HTTP upstream on 127.0.0.1:0 that counts what it executes.
//!
//! Paths:
//! - `/v1/charges...`, `/hook...`, anything else: 201, `Location`, a JSON body
//!   naming the execution number, method, path, query and body length;
//!   `?delay_ms=N` waits first; `?status=N` answers N; `?cookie=1` adds Set-Cookie;
//!   `?pad=N` pads the body with N bytes; `?marker=V` adds `Idempotent-Replayed: V`
//!   (an upstream that answers with a field of the gateway's marker's name);
//!   `?claims=1` adds `Idempotency-Degraded: true` and `Idempotency-Replay: omitted`;
//!   `?encoding=V` adds `Content-Encoding: V`; `?expires=V` adds
//!   `Idempotency-Expires: V` (an upstream that answers with a field of a
//!   route's `expiry_header` name).
//! - `/echo`: 200, JSON of method, path, query, headers, body sha-less length.
//! - `/big?bytes=N`: streams N bytes in 64 KiB chunks.
//! - `/sink`: reads the body as it streams and answers its length.
//! - `/reset`: reads the request, then closes the connection without answering.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

type Body = BoxBody<Bytes, std::io::Error>;

#[derive(Default)]
pub struct Counters {
    pub total: AtomicU64,
    /// Executions by the value of the `Idempotency-Key` header (or "" when absent).
    pub by_key: Mutex<HashMap<String, u64>>,
    /// The last request head seen, for header assertions.
    pub last_headers: Mutex<Vec<(String, String)>>,
    /// Connections accepted so far.
    pub connections: AtomicU64,
    /// Connections open now, and the most ever open at once.
    pub open: AtomicU64,
    pub most_open: AtomicU64,
}

/// Counts a connection as open while it lives.
struct OpenConnection(Arc<Counters>);

impl OpenConnection {
    fn new(counters: Arc<Counters>) -> Self {
        counters.connections.fetch_add(1, Ordering::SeqCst);
        let now = counters.open.fetch_add(1, Ordering::SeqCst) + 1;
        counters.most_open.fetch_max(now, Ordering::SeqCst);
        Self(counters)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct MockUpstream {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl MockUpstream {
    pub async fn start() -> MockUpstream {
        Self::start_with("127.0.0.1:0", None).await
    }

    /// Serves over TLS with the given server configuration (`https://localhost:PORT`).
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> MockUpstream {
        Self::start_with("127.0.0.1:0", Some(config)).await
    }

    /// Serves on `bind` (`"[::1]:0"`), over TLS when given a configuration.
    pub async fn start_on(bind: &str, tls: Option<Arc<rustls::ServerConfig>>) -> MockUpstream {
        Self::start_with(bind, tls).await
    }

    async fn start_with(bind: &str, tls: Option<Arc<rustls::ServerConfig>>) -> MockUpstream {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new(Counters::default());
        let state = counters.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let _open = OpenConnection::new(state.clone());
                    let service = service_fn(move |req| handle(req, state.clone()));
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    // The gateway's limits are under test, not hyper's
                    // (100 fields): a head at the gateway's own limit gets
                    // the gateway's X-Forwarded-* and X-Request-Id on top.
                    builder.http1().max_headers(256);
                    match tls {
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                        Some(config) => {
                            if let Ok(stream) =
                                tokio_rustls::TlsAcceptor::from(config).accept(stream).await
                            {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                    }
                });
            }
        });
        MockUpstream {
            addr,
            counters,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far, and the most open at once.
    pub fn connections(&self) -> (u64, u64) {
        (
            self.counters.connections.load(Ordering::SeqCst),
            self.counters.most_open.load(Ordering::SeqCst),
        )
    }

    pub fn total(&self) -> u64 {
        self.counters.total.load(Ordering::SeqCst)
    }

    pub fn executions(&self, key: &str) -> u64 {
        *self.counters.by_key.lock().unwrap().get(key).unwrap_or(&0)
    }

    /// Waits (at most 20 s) until a request with `key` has reached it.
    pub async fn until_executed(&self, key: &str) {
        let arrived = std::time::Instant::now();
        while self.executions(key) == 0 {
            assert!(
                arrived.elapsed() < std::time::Duration::from_secs(20),
                "{key} never reached the upstream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub fn last_header(&self, name: &str) -> Option<String> {
        self.counters
            .last_headers
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn query_param(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Counters>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    *state.last_headers.lock().unwrap() = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    if path == "/sink" {
        let mut body = req.into_body();
        let mut length: u64 = 0;
        // Stops at an error: a body the gateway gave up on (an HTTP/2
        // stream it reset) may repeat its error without ever ending.
        while let Some(Ok(frame)) = body.frame().await {
            length += frame.into_data().map(|d| d.len() as u64).unwrap_or(0);
        }
        return Ok(Response::new(full(length.to_string())));
    }
    if path == "/stall" {
        // Declares `bytes`, sends `sent` of them, then nothing, connection open.
        let param = |name| query_param(&req, name).and_then(|v| v.parse::<usize>().ok());
        let (bytes, sent) = (param("bytes").unwrap_or(100), param("sent").unwrap_or(0));
        let first = futures_util::stream::iter(
            (sent > 0).then(|| Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![b'x'; sent])))),
        );
        let body = StreamBody::new(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        ))
        .boxed();
        let mut response = Response::new(body);
        response
            .headers_mut()
            .insert("content-length", bytes.to_string().parse().unwrap());
        return Ok(response);
    }
    if path == "/big" {
        let bytes: u64 = query_param(&req, "bytes")
            .and_then(|b| b.parse().ok())
            .unwrap_or(0);
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let chunks = (0..bytes.div_ceil(64 * 1024)).map(move |i| {
            let left = bytes - i * 64 * 1024;
            Ok::<_, std::io::Error>(Frame::data(chunk.slice(..left.min(64 * 1024) as usize)))
        });
        let body = StreamBody::new(futures_util::stream::iter(chunks)).boxed();
        let mut response = Response::new(body);
        response
            .headers_mut()
            .insert("content-length", bytes.to_string().parse().unwrap());
        return Ok(response);
    }

    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let method = req.method().to_string();
    let version = format!("{:?}", req.version());
    let query = req.uri().query().unwrap_or("").to_string();
    let delay: u64 = query_param(&req, "delay_ms")
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    let status: u16 = query_param(&req, "status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(201);
    let cookie = query_param(&req, "cookie").is_some();
    let marker = query_param(&req, "marker");
    let claims = query_param(&req, "claims").is_some();
    let encoding = query_param(&req, "encoding");
    let expires = query_param(&req, "expires");
    let pad: usize = query_param(&req, "pad")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned().into(),
            )
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();

    if path == "/reset" {
        state.total.fetch_add(1, Ordering::SeqCst);
        *state.by_key.lock().unwrap().entry(key).or_default() += 1;
        // Returning an error makes hyper close the connection without an answer.
        tokio::time::sleep(Duration::from_millis(delay)).await;
        return Ok(Response::builder()
            .status(200)
            .header("content-length", "100")
            .body(full("truncated"))
            .unwrap());
    }
    if path == "/echo" {
        let doc = serde_json::json!({
            "method": method, "path": path, "query": query, "version": version,
            "headers": headers, "body": String::from_utf8_lossy(&body),
        });
        return Ok(Response::new(full(doc.to_string())));
    }

    let n = state.total.fetch_add(1, Ordering::SeqCst) + 1;
    *state.by_key.lock().unwrap().entry(key).or_default() += 1;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let doc = serde_json::json!({
        "execution": n, "method": method, "path": path, "query": query,
        "body_len": body.len(), "id": format!("ch_{n}"), "pad": "p".repeat(pad),
    });
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("location", format!("/v1/charges/ch_{n}"))
        .header("x-execution", n.to_string());
    if cookie {
        builder = builder.header("set-cookie", format!("session={n}"));
    }
    if let Some(marker) = marker {
        builder = builder.header("idempotent-replayed", marker);
    }
    if let Some(encoding) = encoding {
        builder = builder.header("content-encoding", encoding);
    }
    if let Some(expires) = expires {
        builder = builder.header("idempotency-expires", expires);
    }
    if claims {
        builder = builder
            .header("idempotency-degraded", "true")
            .header("idempotency-replay", "omitted");
    }
    Ok(builder.body(full(doc.to_string())).unwrap())
}

/// An upstream that reads each request head and closes the connection without
/// answering: the request was delivered, its outcome is unknown.
pub async fn start_resetting() -> (SocketAddr, Arc<AtomicU64>) {
    use tokio::io::AsyncReadExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut read = Vec::new();
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    read.extend_from_slice(&buf[..n]);
                    if read.windows(4).any(|w| w == b"\r\n\r\n") {
                        seen.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                }
                drop(stream);
            });
        }
    });
    (addr, count)
}

//! Fault injection under steady load: two gateway processes on PostgreSQL +
//! Redis, four client tasks sending fresh keys and retries of earlier keys,
//! while one fault at a time is injected and removed:
//!
//! - a gateway SIGKILLed mid-request, then restarted;
//! - its PostgreSQL sessions terminated (`pg_terminate_backend`);
//! - PostgreSQL unreachable, then back (a relay in front of it is cut and
//!   restored: the shared server, and the tests beside this one, are left alone);
//! - this test's Redis keys flushed (its own prefix, not `FLUSHALL`);
//! - Redis unreachable, then back (a relay in front of it);
//! - the upstream resetting connections after reading the request;
//! - the upstream hanging past its timeout.
//!
//! After each fault the load stops, every key without a final answer is
//! retried until it has one, and every key is sent once more (read-back).
//! Then, from the client's answers and the upstream's own execution log:
//! requests sent, upstream executions, keys executed more than once, wrong
//! replays, acknowledged answers lost, time to recover. The invariants are
//! asserted after the report is written to `target/fault-report.md`.
//!
//! `cargo test --test faults -- --nocapture` prints the table.

mod common;
mod pg_support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::config::{Config, Route, Store, Upstream};
use common::{GatewayProcess, TestDir};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use pg_support::switch::Switch;
use pg_support::{RedisPrefix, TestSchema};
use tokio::net::TcpListener;

/// Upstream timeout 1 s, lease 3 s (it must exceed the timeout): a key held
/// by a killed gateway is taken over 3 s after it was reserved.
fn config(pg_url: &str, redis_url: &str, redis_prefix: &str) -> Config {
    Config::new()
        .server("shutdown_grace", "1s")
        .store(
            Store::postgres(pg_url)
                .set("pool_size", 8)
                .set("connect_timeout", "1s")
                .set("statement_timeout", "2s")
                .set("sweep_interval", "1s")
                .redis(redis_url, redis_prefix),
        )
        .upstream(Upstream::api().set("connect_timeout", "1s").timeout("1s"))
        .defaults("lock_timeout", "3s")
        .defaults("on_in_flight", "conflict")
        .defaults("on_store_error", "reject")
        .route(Route::api("charges", "/v1/charges").set("required", true))
}

const GATEWAYS: usize = 2;
const CLIENTS: usize = 4;
/// Each client task stops after this many requests (or when told to).
const MAX_PER_CLIENT: usize = 400;
/// Pause between two requests of one client task.
const PACE: Duration = Duration::from_millis(15);
/// The upstream's normal service time: requests are in flight when a fault hits.
const SERVICE_TIME: Duration = Duration::from_millis(40);
/// Service time of keys named `*-slow-*`: surely in flight when the gateway
/// serving them is killed.
const SLOW_SERVICE_TIME: Duration = Duration::from_millis(600);
/// How long the upstream hangs in `Hang` mode (past the 1 s timeout).
const HANG: Duration = Duration::from_millis(1600);
const WARM_UP: Duration = Duration::from_millis(1000);
const AFTER: Duration = Duration::from_millis(2500);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
const SETTLE_WITHIN: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// An upstream that logs every execution (key, number, time) and can be told
// to reset connections or to hang.

const NORMAL: u8 = 0;
const RESET: u8 = 1;
const HANGING: u8 = 2;

struct Execution {
    key: String,
    n: u64,
    at: Instant,
}

#[derive(Default)]
struct UpstreamState {
    mode: AtomicU8,
    total: AtomicU64,
    log: Mutex<Vec<Execution>>,
}

struct FaultyUpstream {
    addr: SocketAddr,
    state: Arc<UpstreamState>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyUpstream {
    async fn start() -> FaultyUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(UpstreamState::default());
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| execute(req, state.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultyUpstream { addr, state, task }
    }

    fn set_mode(&self, mode: u8) {
        self.state.mode.store(mode, Ordering::SeqCst);
    }

    /// (time, execution number) of every execution of `key`.
    fn executions(&self) -> HashMap<String, Vec<(Instant, u64)>> {
        let mut by_key: HashMap<String, Vec<(Instant, u64)>> = HashMap::new();
        for e in self.state.log.lock().unwrap().iter() {
            by_key.entry(e.key.clone()).or_default().push((e.at, e.n));
        }
        by_key
    }
}

impl Drop for FaultyUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads the whole request, counts it as executed (it reached the service),
/// then answers `{"key", "execution"}` — or, in `RESET` mode, closes the
/// connection without answering, or in `HANGING` mode answers too late.
async fn execute(
    req: Request<Incoming>,
    state: Arc<UpstreamState>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let _ = req.into_body().collect().await;
    let n = state.total.fetch_add(1, Ordering::SeqCst) + 1;
    state.log.lock().unwrap().push(Execution {
        key: key.clone(),
        n,
        at: Instant::now(),
    });
    match state.mode.load(Ordering::SeqCst) {
        RESET => {
            // A service error makes hyper close the connection unanswered.
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset on purpose",
            ));
        }
        HANGING => tokio::time::sleep(HANG).await,
        _ if key.contains("-slow-") => tokio::time::sleep(SLOW_SERVICE_TIME).await,
        _ => tokio::time::sleep(SERVICE_TIME).await,
    }
    let body = serde_json::json!({ "key": key, "execution": n }).to_string();
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("location", format!("/v1/charges/ch_{n}"))
        .body(Full::new(Bytes::from(body)))
        .unwrap())
}

// ---------------------------------------------------------------------------
// Clients.

#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    replayed: Option<String>,
    /// The problem `code` of a gateway error (`upstream-unreachable`, ...).
    code: Option<String>,
    body: Bytes,
}

impl Answer {
    /// A final answer: the gateway decided the key (not "in flight", not
    /// "store unavailable", not "upstream unreachable": the gateway frees the
    /// key when nothing was sent, so a retry running it is right).
    fn is_final(&self) -> bool {
        self.status != 409
            && self.status != 503
            && self.code.as_deref() != Some("upstream-unreachable")
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// (key, execution) named by an upstream answer's body.
    fn names(&self) -> Option<(String, u64)> {
        let doc: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        Some((doc["key"].as_str()?.to_owned(), doc["execution"].as_u64()?))
    }
}

#[derive(Debug, Clone)]
struct Sample {
    key: String,
    gateway: usize,
    sent: Instant,
    done: Instant,
    /// `Err`: no answer (connection refused or broken, client timeout).
    reply: Result<Answer, String>,
}

type Http = HyperClient<HttpConnector, Full<Bytes>>;

fn http() -> Http {
    HyperClient::builder(TokioExecutor::new()).build_http()
}

async fn send(client: &Http, addrs: &[SocketAddr], gateway: usize, key: &str) -> Sample {
    let request = Request::post(format!("http://{}/v1/charges", addrs[gateway]))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(format!("{{\"key\":\"{key}\"}}"))))
        .unwrap();
    let sent = Instant::now();
    let exchange = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Answer {
            status: parts.status.as_u16(),
            replayed: parts
                .headers
                .get("idempotent-replayed")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            code: serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|doc| doc["code"].as_str().map(str::to_owned)),
            body,
        })
    };
    let reply = tokio::time::timeout(CLIENT_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err("client timeout".into()));
    Sample {
        key: key.to_owned(),
        gateway,
        sent,
        done: Instant::now(),
        reply,
    }
}

/// xorshift64: reproducible choices without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Steady load: each task sends a fresh key 60% of the time, otherwise a
/// retry of one of its 20 latest keys, to the gateways in turn.
fn start_load(
    tag: &str,
    addrs: Arc<Vec<SocketAddr>>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Sample>>> {
    (0..CLIENTS)
        .map(|task| {
            let (tag, addrs, stop) = (tag.to_owned(), addrs.clone(), stop.clone());
            tokio::spawn(async move {
                let client = http();
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((task as u64 + 1) * 0x1000_0001));
                let mut keys: Vec<String> = Vec::new();
                let mut samples = Vec::new();
                while !stop.load(Ordering::SeqCst) && samples.len() < MAX_PER_CLIENT {
                    let key = if keys.is_empty() || rng.next() % 10 < 6 {
                        keys.push(format!("{tag}-{task}-{}", keys.len()));
                        keys.last().unwrap().clone()
                    } else {
                        let recent = keys.len().min(20) as u64;
                        keys[keys.len() - 1 - (rng.next() % recent) as usize].clone()
                    };
                    let gateway = (task + samples.len()) % addrs.len();
                    samples.push(send(&client, &addrs, gateway, &key).await);
                    tokio::time::sleep(PACE).await;
                }
                samples
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The cluster and the faults.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Terminate,
    PgCut,
    PgCutLong,
    RedisFlush,
    RedisCut,
    UpstreamReset,
    UpstreamHang,
}

impl Fault {
    fn all() -> [Fault; 8] {
        [
            Fault::Kill,
            Fault::Terminate,
            Fault::PgCut,
            Fault::PgCutLong,
            Fault::RedisFlush,
            Fault::RedisCut,
            Fault::UpstreamReset,
            Fault::UpstreamHang,
        ]
    }

    fn tag(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Terminate => "terminate",
            Fault::PgCut => "pgcut",
            Fault::PgCutLong => "pglong",
            Fault::RedisFlush => "flush",
            Fault::RedisCut => "rediscut",
            Fault::UpstreamReset => "reset",
            Fault::UpstreamHang => "hang",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Fault::Kill => "(a) gateway SIGKILL mid-request, restart",
            Fault::Terminate => "(b) Postgres sessions terminated",
            Fault::PgCut => "(c) Postgres unreachable, then back",
            Fault::PgCutLong => "(c') Postgres unreachable longer than the lease",
            Fault::RedisFlush => "(d) Redis prefix flushed",
            Fault::RedisCut => "(d) Redis unreachable, then back",
            Fault::UpstreamReset => "(e) upstream resets after reading",
            Fault::UpstreamHang => "(f) upstream hangs past timeout",
        }
    }
}

struct Cluster {
    gateways: Vec<GatewayProcess>,
    addrs: Arc<Vec<SocketAddr>>,
    _dirs: Vec<TestDir>,
    upstream: FaultyUpstream,
    pg: Switch,
    redis: Switch,
    schema: TestSchema,
    prefix: RedisPrefix,
    /// When the last fault was injected.
    injected: Instant,
}

fn redis_addr() -> SocketAddr {
    let url = pg_support::redis_url();
    let rest = url.trim_start_matches("redis://");
    let host_port = rest.split('/').next().unwrap();
    let host_port = host_port.replace("localhost", "127.0.0.1");
    host_port
        .parse()
        .expect("write IDEMGATE_TEST_REDIS_URL as redis://IP:PORT")
}

impl Cluster {
    async fn start() -> Cluster {
        let schema = TestSchema::create().await;
        let prefix = RedisPrefix::new("idemgate-faults");
        let upstream = FaultyUpstream::start().await;
        let pg = Switch::start(pg_support::server_addr()).await;
        let redis = Switch::start(redis_addr()).await;
        let template = config(
            &pg_support::via(&schema.url(), pg.addr),
            &format!("redis://{}", redis.addr),
            &prefix.0,
        );
        let upstream_url = format!("http://{}", upstream.addr);
        let mut gateways = Vec::new();
        let mut dirs = Vec::new();
        for n in 0..GATEWAYS {
            let dir = TestDir::new(&format!("faults{n}"));
            let gateway = tokio::task::block_in_place(|| {
                GatewayProcess::start(&dir, &upstream_url, &template)
            });
            gateways.push(gateway);
            dirs.push(dir);
        }
        let addrs = Arc::new(gateways.iter().map(|g| g.addr).collect());
        Cluster {
            gateways,
            addrs,
            _dirs: dirs,
            upstream,
            pg,
            redis,
            schema,
            prefix,
            injected: Instant::now(),
        }
    }

    fn logs(&self) -> String {
        self.gateways
            .iter()
            .map(GatewayProcess::log_text)
            .collect::<Vec<_>>()
            .join("\n----\n")
    }

    /// Injects the fault, holds it, removes it; returns when it was removed
    /// and what was done.
    async fn inject(&mut self, fault: Fault) -> (Instant, String, Vec<Sample>) {
        self.injected = Instant::now();
        match fault {
            Fault::Kill => {
                // Besides the load, three slow requests that are surely at
                // the upstream when gateway 0 dies.
                let slow: Vec<_> = (0..3)
                    .map(|i| {
                        let addrs = self.addrs.clone();
                        tokio::spawn(async move {
                            send(&http(), &addrs, 0, &format!("kill-slow-{i}")).await
                        })
                    })
                    .collect();
                tokio::time::sleep(Duration::from_millis(300)).await;
                self.injected = Instant::now();
                tokio::task::block_in_place(|| self.gateways[0].kill());
                let mut extra = Vec::new();
                for task in slow {
                    extra.push(task.await.unwrap());
                }
                tokio::time::sleep(Duration::from_millis(1000)).await;
                let removed = Instant::now();
                tokio::task::block_in_place(|| self.gateways[0].restart());
                (
                    removed,
                    "gateway 0 killed, restarted 1 s later".into(),
                    extra,
                )
            }
            Fault::Terminate => {
                let mut terminated = 0;
                for _ in 0..5 {
                    terminated += pg_support::terminate_sessions(&self.schema.name).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                (
                    Instant::now(),
                    format!("5 rounds 300 ms apart, {terminated} sessions terminated"),
                    Vec::new(),
                )
            }
            Fault::PgCut => {
                self.pg.cut();
                tokio::time::sleep(Duration::from_millis(2000)).await;
                self.pg.restore();
                (Instant::now(), "relay cut for 2 s".into(), Vec::new())
            }
            Fault::PgCutLong => {
                self.pg.cut();
                tokio::time::sleep(Duration::from_millis(4000)).await;
                self.pg.restore();
                (
                    Instant::now(),
                    "relay cut for 4 s (lease 3 s)".into(),
                    Vec::new(),
                )
            }
            Fault::RedisFlush => {
                for _ in 0..10 {
                    pg_support::redis_flush_prefix(&self.prefix.0).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                (
                    Instant::now(),
                    "prefix deleted 10 times, 200 ms apart".into(),
                    Vec::new(),
                )
            }
            Fault::RedisCut => {
                self.redis.cut();
                tokio::time::sleep(Duration::from_millis(2000)).await;
                self.redis.restore();
                (Instant::now(), "relay cut for 2 s".into(), Vec::new())
            }
            Fault::UpstreamReset => {
                self.upstream.set_mode(RESET);
                tokio::time::sleep(Duration::from_millis(2000)).await;
                self.upstream.set_mode(NORMAL);
                (
                    Instant::now(),
                    "every request reset for 2 s".into(),
                    Vec::new(),
                )
            }
            Fault::UpstreamHang => {
                self.upstream.set_mode(HANGING);
                tokio::time::sleep(Duration::from_millis(2500)).await;
                self.upstream.set_mode(NORMAL);
                (
                    Instant::now(),
                    format!("answers after {HANG:?} (timeout 1 s) for 2.5 s"),
                    Vec::new(),
                )
            }
        }
    }

    async fn run(&mut self, fault: Fault) -> Row {
        let tag = fault.tag();
        let stop = Arc::new(AtomicBool::new(false));
        let load = start_load(tag, self.addrs.clone(), stop.clone());
        tokio::time::sleep(WARM_UP).await;
        let (removed, what, extra) = self.inject(fault).await;
        let injected = self.injected;
        tokio::time::sleep(AFTER).await;
        stop.store(true, Ordering::SeqCst);
        let mut samples = extra;
        for task in load {
            samples.extend(task.await.unwrap());
        }
        let in_load = samples.len();
        samples.extend(self.settle(&samples).await);
        let settle = samples.len() - in_load;
        samples.extend(self.read_back(&samples).await);
        let read_back = samples.len() - in_load - settle;
        let executions: HashMap<String, Vec<(Instant, u64)>> = self
            .upstream
            .executions()
            .into_iter()
            .filter(|(k, _)| k.starts_with(&format!("{tag}-")))
            .collect();
        let recovery_gateway = (fault == Fault::Kill).then_some(0);
        analyse(
            fault,
            &what,
            &samples,
            &executions,
            injected,
            removed,
            recovery_gateway,
            (in_load, settle, read_back),
        )
    }

    /// Retries every key that has no final answer yet until it has one.
    async fn settle(&self, samples: &[Sample]) -> Vec<Sample> {
        let mut final_keys = std::collections::HashSet::new();
        let mut all = std::collections::BTreeSet::new();
        for s in samples {
            all.insert(s.key.clone());
            if matches!(&s.reply, Ok(a) if a.is_final()) {
                final_keys.insert(s.key.clone());
            }
        }
        let open: Vec<String> = all
            .into_iter()
            .filter(|k| !final_keys.contains(k))
            .collect();
        let tasks: Vec<_> = open
            .into_iter()
            .enumerate()
            .map(|(i, key)| {
                let addrs = self.addrs.clone();
                tokio::spawn(async move {
                    let client = http();
                    let deadline = Instant::now() + SETTLE_WITHIN;
                    let mut tries = Vec::new();
                    loop {
                        let sample =
                            send(&client, &addrs, (i + tries.len()) % addrs.len(), &key).await;
                        let done = matches!(&sample.reply, Ok(a) if a.is_final());
                        tries.push(sample);
                        if done || Instant::now() > deadline {
                            return tries;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        for task in tasks {
            out.extend(task.await.unwrap());
        }
        out
    }

    /// Sends every key once more: a key whose answer was lost would run
    /// again or replay something else now.
    async fn read_back(&self, samples: &[Sample]) -> Vec<Sample> {
        let keys: Vec<String> = samples
            .iter()
            .map(|s| s.key.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut out = Vec::new();
        for (c, chunk) in keys.chunks(16).enumerate() {
            let tasks: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    let (addrs, key) = (self.addrs.clone(), key.clone());
                    tokio::spawn(
                        async move { send(&http(), &addrs, (c + i) % addrs.len(), &key).await },
                    )
                })
                .collect();
            for task in tasks {
                out.push(task.await.unwrap());
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Analysis and report.

#[derive(Debug, Default)]
struct Row {
    title: String,
    what: String,
    sent: usize,
    phases: (usize, usize, usize),
    keys: usize,
    executions: usize,
    duplicated: usize,
    /// Duplicates explained by a takeover after SIGKILL (their first holder
    /// died before it could record an answer), or by an answer that could
    /// not be recorded because Postgres was down for the whole lease.
    explained: usize,
    wrong_replays: usize,
    /// Acknowledged answers lost, not counting the explained ones.
    lost: usize,
    lost_explained: usize,
    unsettled: usize,
    recovery: Option<Duration>,
    statuses: BTreeMap<String, usize>,
    problems: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn analyse(
    fault: Fault,
    what: &str,
    samples: &[Sample],
    executions: &HashMap<String, Vec<(Instant, u64)>>,
    injected: Instant,
    removed: Instant,
    recovery_gateway: Option<usize>,
    phases: (usize, usize, usize),
) -> Row {
    let mut row = Row {
        title: fault.title().into(),
        what: what.into(),
        sent: samples.len(),
        phases,
        executions: executions.values().map(Vec::len).sum(),
        ..Row::default()
    };
    let mut by_key: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_key.entry(&s.key).or_default().push(s);
        let label = match &s.reply {
            Ok(a) => match (a.replayed.as_deref(), a.code.as_deref()) {
                (Some("true"), _) => format!("{} replay", a.status),
                (_, Some(code)) => format!("{} {code}", a.status),
                _ => a.status.to_string(),
            },
            Err(_) => "no answer".into(),
        };
        *row.statuses.entry(label).or_default() += 1;
    }
    row.keys = by_key.len();

    // Wrong replays: an upstream answer that names another key, or an
    // execution the upstream never ran for this key.
    for s in samples {
        let Ok(answer) = &s.reply else { continue };
        if !answer.is_success() {
            continue;
        }
        let ran = executions.get(&s.key);
        match answer.names() {
            Some((key, n)) if key == s.key && ran.is_some_and(|r| r.iter().any(|e| e.1 == n)) => {}
            other => {
                row.wrong_replays += 1;
                row.problems
                    .push(format!("{}: answer names {other:?}", s.key));
            }
        }
    }

    for (key, mut tries) in by_key {
        tries.sort_by_key(|s| s.done);
        let ran = executions.get(key).map(Vec::as_slice).unwrap_or_default();
        // The first final answer the client received: the acknowledgment.
        let ack = tries
            .iter()
            .find(|s| matches!(&s.reply, Ok(a) if a.is_final()));
        let Some(ack) = ack else {
            row.unsettled += 1;
            row.problems
                .push(format!("{key}: never got a final answer"));
            continue;
        };
        let ack_answer = ack.reply.as_ref().unwrap();
        // Every later final answer must be the same answer, byte for byte.
        let mut lost = false;
        for s in &tries {
            let Ok(a) = &s.reply else { continue };
            if !a.is_final() || s.done <= ack.done {
                continue;
            }
            if a.status != ack_answer.status || a.body != ack_answer.body {
                if a.replayed.as_deref() == Some("true") {
                    row.wrong_replays += 1;
                    row.problems.push(format!(
                        "{key}: replayed {} after {}",
                        a.status, ack_answer.status
                    ));
                } else {
                    lost = true;
                }
            }
        }
        // And nothing may run again once it was acknowledged.
        if ran.iter().any(|(at, _)| *at > ack.done) {
            lost = true;
        }
        // The known limit: the upstream answered while Postgres was down,
        // and stayed down for the rest of the lease; the gateway returned the
        // answer it could not record (logged as an error), and after the
        // lease the key was taken over.
        let unrecorded = fault == Fault::PgCutLong
            && ran.first().is_some_and(|(at, _)| *at < removed)
            && ack.done >= injected;
        if lost && unrecorded {
            row.lost_explained += 1;
        } else if lost {
            row.lost += 1;
            row.problems.push(format!(
                "{key}: acknowledged with {} {} then ran or answered again ({} executions)",
                ack_answer.status,
                ack_answer.code.as_deref().unwrap_or_default(),
                ran.len()
            ));
        }
        if ran.len() > 1 {
            row.duplicated += 1;
            // A request of this key died with the gateway (no answer), so its
            // lease expired unrecorded and the next request took it over.
            let died = fault == Fault::Kill && tries.iter().any(|s| s.reply.is_err());
            if (died && !lost) || unrecorded {
                row.explained += 1;
            } else {
                row.problems.push(format!(
                    "{key}: executed {} times, answers {:?}",
                    ran.len(),
                    tries
                        .iter()
                        .map(|s| s.reply.as_ref().map(|a| a.status).ok())
                        .collect::<Vec<_>>()
                ));
            }
        }
    }

    // Recovery: the first fresh 2xx (a new key executed and recorded) of a
    // request sent after the fault was removed.
    row.recovery = samples
        .iter()
        .filter(|s| s.sent >= removed)
        .filter(|s| recovery_gateway.is_none_or(|g| s.gateway == g))
        .filter(|s| {
            matches!(&s.reply, Ok(a) if a.is_success() && a.replayed.as_deref() == Some("false"))
        })
        .map(|s| s.done - removed)
        .min();
    if fault == Fault::Kill {
        // Requests the killed gateway was serving: sent before the kill, no answer.
        let died = samples
            .iter()
            .filter(|s| s.gateway == 0 && s.sent < injected && s.done >= injected)
            .filter(|s| s.reply.is_err())
            .count();
        let _ = write!(
            row.what,
            "; {died} requests in flight at the kill got no answer"
        );
    }
    row
}

fn report(rows: &[Row], total: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | fault | requests sent | upstream executions | keys | keys executed more than once | wrong replays | acknowledged answers lost | time to recover | answers |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let why = if r.title.starts_with("(a)") {
            "taken over after SIGKILL, never answered before"
        } else {
            "answered but not recorded: Postgres down for the whole lease"
        };
        let dup = if r.explained > 0 {
            format!("{} ({} {why})", r.duplicated, r.explained)
        } else {
            r.duplicated.to_string()
        };
        let lost = if r.lost_explained > 0 {
            format!("{} + {} ({why})", r.lost, r.lost_explained)
        } else {
            r.lost.to_string()
        };
        let recovery = r
            .recovery
            .map(|d| format!("{} ms", d.as_millis()))
            .unwrap_or_else(|| "never".into());
        let answers = r
            .statuses
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.title,
            r.what,
            r.sent,
            r.executions,
            r.keys,
            dup,
            r.wrong_replays,
            lost,
            recovery,
            answers
        );
    }
    let _ = writeln!(
        out,
        "\n{GATEWAYS} gateways on Postgres + Redis, {CLIENTS} client tasks (60% fresh keys, 40% retries), \
         upstream timeout 1 s, lease 3 s; requests sent include the settle and read-back phases; \
         whole run {:.1} s.",
        total.as_secs_f64()
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn faults_under_load_keep_the_guarantees() {
    let started = Instant::now();
    let mut cluster = Cluster::start().await;
    let mut rows = Vec::new();
    for fault in Fault::all() {
        let row = cluster.run(fault).await;
        println!(
            "{}: {} sent ({:?} load/settle/read-back), {} executions, {} duplicated, {} wrong, {} lost, recovery {:?}",
            row.title,
            row.sent,
            row.phases,
            row.executions,
            row.duplicated,
            row.wrong_replays,
            row.lost,
            row.recovery
        );
        rows.push(row);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let table = report(&rows, started.elapsed());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fault-report.md"), &table).unwrap();
    println!("\n{table}");

    let mut failures = Vec::new();
    for r in &rows {
        let unexplained = r.duplicated - r.explained;
        if unexplained > 0 || r.wrong_replays > 0 || r.lost > 0 || r.unsettled > 0 {
            failures.push(format!("{}:\n  {}", r.title, r.problems.join("\n  ")));
        }
        if r.recovery.is_none() {
            failures.push(format!(
                "{}: no fresh request succeeded after the fault",
                r.title
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nlogs:\n{}",
        failures.join("\n"),
        cluster.logs()
    );
}

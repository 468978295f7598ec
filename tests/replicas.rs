//! Several gateway processes on one PostgreSQL (and Redis): one upstream
//! execution per key, identical answers everywhere, whatever happens to Redis
//! or to the database connections.
//!
//! Each test has its own schema and Redis key prefix. "FLUSHALL" is done as a
//! delete of this test's prefix (a real FLUSHALL would disturb the tests
//! running beside it), and "Redis stopped" as a Redis URL where nothing
//! listens (stopping the shared server would too) — for the gateway both are
//! the same as the real thing.

mod common;
mod pg_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::config::{Config, Route, Store, Upstream};
use common::{Client, GatewayProcess, MockUpstream, Reply, TestDir};
use pg_support::switch::Switch;
use pg_support::{RedisPrefix, TestSchema, redis_flush_prefix, redis_url};

/// Postgres at `pg_url`, with `[store.redis]` when given (url, prefix).
fn config(pg_url: &str, redis: Option<(&str, &str)>) -> Config {
    let mut store = Store::postgres(pg_url)
        .set("pool_size", 8)
        .set("connect_timeout", "1s")
        .set("statement_timeout", "2s")
        .set("sweep_interval", "1s");
    if let Some((url, prefix)) = redis {
        store = store.redis(url, prefix);
    }
    Config::new()
        .server("shutdown_grace", "1s")
        .store(store)
        .upstream(Upstream::api().timeout("3s"))
        .defaults("lock_timeout", "30s")
        .defaults("on_in_flight", "wait")
        .defaults("wait_timeout", "10s")
        .defaults("on_store_error", "reject")
        .route(Route::api("charges", "/v1/charges").set("required", true))
}

const KEYS: usize = 100;

struct Cluster {
    gateways: Vec<GatewayProcess>,
    upstream: MockUpstream,
    _dirs: Vec<TestDir>,
}

impl Cluster {
    /// Three gateways on `pg_url`, with `[store.redis]` when given (url, prefix).
    async fn start(pg_url: &str, redis: Option<(&str, &str)>) -> Cluster {
        let upstream = MockUpstream::start().await;
        let template = config(pg_url, redis);
        let mut dirs = Vec::new();
        let mut gateways = Vec::new();
        for n in 0..3 {
            let dir = TestDir::new(&format!("replica{n}"));
            gateways.push(GatewayProcess::start(&dir, &upstream.url(), &template));
            dirs.push(dir);
        }
        Cluster {
            gateways,
            upstream,
            _dirs: dirs,
        }
    }

    fn clients(&self) -> Vec<Client> {
        self.gateways.iter().map(GatewayProcess::client).collect()
    }

    /// Every key sent to every gateway `rounds` times, all at once; returns
    /// the final answers by key.
    async fn storm(&self, keys: &[String], rounds: usize) -> HashMap<String, Vec<Reply>> {
        let mut tasks = Vec::new();
        for _ in 0..rounds {
            for client in self.clients() {
                for key in keys {
                    let (client, key) = (client.clone(), key.clone());
                    tasks.push(tokio::spawn(async move {
                        let reply = settle(&client, &key).await;
                        (key, reply)
                    }));
                }
            }
        }
        let mut answers: HashMap<String, Vec<Reply>> = HashMap::new();
        for task in tasks {
            let (key, reply) = task.await.unwrap();
            let Some(reply) = reply else {
                panic!("{key} never settled; logs:\n{}", self.logs());
            };
            answers.entry(key).or_default().push(reply);
        }
        answers
    }

    fn assert_once_each(&self, answers: &HashMap<String, Vec<Reply>>) {
        for (key, replies) in answers {
            assert_eq!(self.upstream.executions(key), 1, "executions of {key}");
            let first = &replies[0];
            assert_eq!(first.status, 201, "{key}: {}", first.text());
            for reply in replies {
                assert_eq!(reply.status, first.status, "{key}");
                assert_eq!(reply.body, first.body, "{key}: answers differ");
                assert_eq!(reply.header("location"), first.header("location"), "{key}");
            }
            let fresh = replies
                .iter()
                .filter(|r| r.header("idempotent-replayed") == Some("false"))
                .count();
            assert!(fresh <= 1, "{key}: {fresh} answers are not replays");
        }
    }

    async fn ready(&self) -> Vec<u16> {
        let mut statuses = Vec::new();
        for gateway in &self.gateways {
            statuses.push(gateway.admin_client().get("/readyz").await.status.as_u16());
        }
        statuses
    }

    fn logs(&self) -> String {
        self.gateways
            .iter()
            .map(GatewayProcess::log_text)
            .collect::<Vec<_>>()
            .join("\n----\n")
    }
}

/// Sends until the answer is final: a 409 (in flight elsewhere, wait timed
/// out) or a 503 (store unreachable) is retried, as a client would.
async fn settle(client: &Client, key: &str) -> Option<Reply> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = client
            .post("/v1/charges", Some(key), "{\"amount\":100}")
            .await;
        if reply.status != 409 && reply.status != 503 {
            return Some(reply);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn keys(tag: &str) -> Vec<String> {
    (0..KEYS).map(|i| format!("{tag}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_execute_each_key_once() {
    let schema = TestSchema::create().await;
    let cluster = Cluster::start(&schema.url(), None).await;
    let keys = keys("pg");
    let answers = cluster.storm(&keys, 3).await;
    cluster.assert_once_each(&answers);
    assert_eq!(cluster.upstream.total(), KEYS as u64);
    // And again, later: all replays.
    let again = cluster.storm(&keys, 1).await;
    for (key, replies) in &again {
        assert!(
            replies.iter().all(|r| r.body == answers[key][0].body),
            "{key}"
        );
    }
    assert_eq!(cluster.upstream.total(), KEYS as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_flushed_mid_run_still_one_execution_per_key() {
    let schema = TestSchema::create().await;
    let guard = RedisPrefix::new("idemgate-replicas");
    let prefix = guard.0.clone();
    let cluster = Cluster::start(&schema.url(), Some((&redis_url(), &prefix))).await;
    let keys = keys("flush");
    let flusher = {
        let prefix = prefix.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                redis_flush_prefix(&prefix).await;
            }
        })
    };
    let answers = cluster.storm(&keys, 3).await;
    flusher.await.unwrap();
    cluster.assert_once_each(&answers);
    // Replays after the flush come from Postgres (and refill Redis), unchanged.
    redis_flush_prefix(&prefix).await;
    let again = cluster.storm(&keys, 2).await;
    for (key, replies) in &again {
        assert!(
            replies.iter().all(|r| r.body == answers[key][0].body),
            "{key}"
        );
    }
    assert_eq!(cluster.upstream.total(), KEYS as u64);
    let metrics = cluster.gateways[0]
        .admin_client()
        .get("/metrics")
        .await
        .text();
    assert!(
        metrics.contains("idemgate_cache_lookups_total{result=\"hit\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_down_still_one_execution_per_key() {
    let schema = TestSchema::create().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cluster = Cluster::start(&schema.url(), Some((&format!("redis://{dead}"), "x:"))).await;
    let keys = keys("nored");
    let answers = cluster.storm(&keys, 3).await;
    cluster.assert_once_each(&answers);
    assert_eq!(cluster.upstream.total(), KEYS as u64);
    assert_eq!(cluster.ready().await, vec![200, 200, 200]);
    let metrics = cluster.gateways[0]
        .admin_client()
        .get("/metrics")
        .await
        .text();
    assert!(
        metrics.contains("idemgate_cache_lookups_total{result=\"error\"}"),
        "{metrics}"
    );
    // The store metrics' `backend` label is the configured `store.backend`,
    // Redis in front or not.
    assert!(
        metrics
            .contains("idemgate_store_duration_seconds_count{backend=\"postgres\",op=\"reserve\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_terminated_by_postgres_recover_without_duplicates() {
    let schema = TestSchema::create().await;
    let cluster = Cluster::start(&schema.url(), None).await;
    let first = keys("before");
    let answers = cluster.storm(&first, 1).await;
    cluster.assert_once_each(&answers);

    // Cut every session of the three gateways, then keep going at once.
    assert!(pg_support::terminate_sessions(&schema.name).await > 0);
    let mut all = first.clone();
    all.extend(keys("after"));
    let answers = cluster.storm(&all, 2).await;
    cluster.assert_once_each(&answers);
    assert_eq!(cluster.upstream.total(), 2 * KEYS as u64);
    assert_eq!(cluster.ready().await, vec![200, 200, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_unreachable_rejects_then_recovers_without_restart() {
    let schema = TestSchema::create().await;
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let cluster = Cluster::start(&url, None).await;
    let first = keys("up");
    let answers = cluster.storm(&first, 1).await;
    cluster.assert_once_each(&answers);

    switch.cut();
    // Fail closed: 503 + Retry-After, nothing forwarded, readiness drops. A
    // completed key may still replay from a replica's in-memory copy (final
    // answers, as from Redis), never run again.
    for client in cluster.clients() {
        for key in ["up-1", "down-1"] {
            let reply = client
                .post("/v1/charges", Some(key), "{\"amount\":100}")
                .await;
            if key == "up-1" && reply.status == 201 {
                assert_eq!(reply.body, answers[key][0].body, "{key}: a replay");
                continue;
            }
            assert_eq!(reply.status, 503, "{key}: {}", reply.text());
            assert!(reply.header("retry-after").is_some());
        }
    }
    assert_eq!(cluster.upstream.total(), KEYS as u64);
    assert_eq!(cluster.ready().await, vec![503, 503, 503]);

    switch.restore();
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.ready().await != vec![200, 200, 200] {
        assert!(
            Instant::now() < deadline,
            "not ready again:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut all = first.clone();
    all.extend(keys("down"));
    let again = cluster.storm(&all, 2).await;
    cluster.assert_once_each(&again);
    for key in &first {
        assert_eq!(again[key][0].body, answers[key][0].body, "{key}");
    }
    assert_eq!(cluster.upstream.total(), 2 * KEYS as u64);
}

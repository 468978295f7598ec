//! A Redis that is up but refuses the gateway's commands: a password the
//! gateway lacks (`NOAUTH` on every call), or `maxmemory` reached under
//! `noeviction` (`OOM` on every write). Redis is only the fast path, so
//! answers stay correct from Postgres; the operator must still be told why
//! the fast path is gone, in a few lines rather than one per request. So
//! too for a Redis it cannot reach (gone away, a host name that does not
//! resolve), whose warning names its host and port.
//! Each test starts a `redis-server` of its own (the machine's shared one is
//! left as it is); a missing binary fails the test and says what to install.

mod common;
mod pg_support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::config::{Config, Route, Store, Upstream};
use common::gateway::free_port;
use common::{GatewayProcess, MockUpstream, TestDir};
use pg_support::{RedisPrefix, TestSchema};

/// A `redis-server` started with `args`, killed on drop.
struct OwnRedis {
    child: Child,
    port: u16,
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis(dir: &TestDir, args: &[&str]) -> OwnRedis {
    let port = free_port().port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(args)
        .arg("--dir")
        .arg(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("redis-server is needed (apt-get install redis-server): {e}"));
    let mut redis = OwnRedis { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = redis.child.try_wait() {
            panic!("redis-server exited at start: {status}");
        }
        assert!(Instant::now() < deadline, "redis-server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    redis
}

fn cache_lookups(metrics: &str, result: &str) -> u64 {
    counter(
        metrics,
        &format!("idemgate_cache_lookups_total{{result=\"{result}\"}}"),
    )
}

fn cache_writes(metrics: &str, result: &str) -> u64 {
    counter(
        metrics,
        &format!("idemgate_cache_writes_total{{result=\"{result}\"}}"),
    )
}

fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A gateway on Postgres and the Redis `redis` starts, with the schema and
/// the upstream it needs kept alive beside it.
async fn gateway_through(
    name: &str,
    redis: &OwnRedis,
) -> (GatewayProcess, MockUpstream, TestSchema, TestDir) {
    gateway_at(name, &format!("redis://127.0.0.1:{}", redis.port)).await
}

/// A gateway on Postgres and the Redis at `url`.
async fn gateway_at(name: &str, url: &str) -> (GatewayProcess, MockUpstream, TestSchema, TestDir) {
    let schema = TestSchema::create().await;
    let prefix = RedisPrefix::new(name);
    let store = Store::postgres(&schema.url())
        .set("pool_size", 4)
        .redis(url, &prefix.0);
    let config = Config::new()
        .server("shutdown_grace", "1s")
        .store(store)
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let dir = TestDir::new(name);
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    (gateway, upstream, schema, dir)
}

/// Sends `keys` fresh keys and a replay of each through a gateway on
/// Postgres and the Redis `redis` starts: every answer is right and runs
/// once. Returns the gateway's log and metrics.
async fn serve_through(name: &str, redis: &OwnRedis, keys: usize) -> (String, String) {
    let (gateway, upstream, _schema, _dir) = gateway_through(name, redis).await;
    let client = gateway.client();
    for n in 0..keys {
        let key = format!("{name}-{n}");
        let first = client.post("/v1/charges", Some(&key), "{}").await;
        assert_eq!(first.status, 201, "{}", first.text());
        let replay = client.post("/v1/charges", Some(&key), "{}").await;
        assert_eq!(replay.status, 201, "{}", replay.text());
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.text(), first.text());
        assert_eq!(upstream.executions(&key), 1);
    }
    let metrics = gateway.admin_client().get("/metrics").await.text();
    (gateway.log_text(), metrics)
}

fn lines_with(log: &str, needle: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("WARN") && l.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_wants_a_password_is_said_once_and_postgres_answers() {
    let dir = TestDir::new("redis-noauth");
    let redis = start_redis(&dir, &["--requirepass", "not-the-gateway-s"]);
    let (log, metrics) = serve_through("redis-noauth", &redis, 12).await;
    assert_eq!(cache_lookups(&metrics, "hit"), 0, "{metrics}");
    assert!(cache_lookups(&metrics, "error") >= 12, "{metrics}");
    let said = lines_with(&log, "NOAUTH");
    assert!(
        (1..=3).contains(&said),
        "{said} warnings name NOAUTH (one, then one per 10 s):\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_said_once_and_postgres_answers() {
    let dir = TestDir::new("redis-oom");
    let redis = start_redis(
        &dir,
        &["--maxmemory", "1", "--maxmemory-policy", "noeviction"],
    );
    let (log, metrics) = serve_through("redis-oom", &redis, 12).await;
    assert_eq!(cache_lookups(&metrics, "hit"), 0, "{metrics}");
    // Each answer's copy and each replay's write-back refused: counted,
    // though the lookups (reads, which OOM lets through) fail none.
    assert!(cache_writes(&metrics, "refused") >= 24, "{metrics}");
    assert_eq!(cache_writes(&metrics, "ok"), 0, "{metrics}");
    assert_eq!(cache_writes(&metrics, "error"), 0, "{metrics}");
    let said = lines_with(&log, "OOM");
    assert!(
        (1..=3).contains(&said),
        "{said} warnings name OOM (one, then one per 10 s):\n{log}"
    );
}

/// A Redis that became a replica (a failover moved the primary elsewhere,
/// and the gateway's address still leads here) answers reads and refuses
/// every write with `READONLY`: no lookup fails, they all miss, and only
/// the refused writes tell why the fast path never fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_became_a_replica_refuses_writes_counted_and_postgres_answers() {
    let dir = TestDir::new("redis-readonly");
    let primary = start_redis(&dir, &[]);
    let replica_dir = TestDir::new("redis-readonly-replica");
    let replica = start_redis(
        &replica_dir,
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
    );
    let (log, metrics) = serve_through("redis-readonly", &replica, 12).await;
    assert_eq!(cache_lookups(&metrics, "hit"), 0, "{metrics}");
    assert_eq!(cache_lookups(&metrics, "error"), 0, "{metrics}");
    assert!(cache_lookups(&metrics, "miss") >= 24, "{metrics}");
    assert!(cache_writes(&metrics, "refused") >= 24, "{metrics}");
    assert_eq!(cache_writes(&metrics, "ok"), 0, "{metrics}");
    // The client names the reply `ReadOnly`.
    let said = lines_with(&log, "ReadOnly");
    assert!(
        (1..=3).contains(&said),
        "{said} warnings name the READONLY reply (one, then one per 10 s):\n{log}"
    );
}

/// Writes Redis takes are counted `ok`: an answer's copy and nothing more
/// (its replay is a hit, written back by nobody).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_redis_takes_are_counted_ok() {
    let dir = TestDir::new("redis-writes-ok");
    let redis = start_redis(&dir, &[]);
    let (_log, metrics) = serve_through("redis-writes-ok", &redis, 3).await;
    assert_eq!(cache_writes(&metrics, "ok"), 3, "{metrics}");
    assert_eq!(cache_writes(&metrics, "refused"), 0, "{metrics}");
    assert_eq!(cache_writes(&metrics, "error"), 0, "{metrics}");
    assert_eq!(cache_lookups(&metrics, "hit"), 3, "{metrics}");
}

/// A Redis gone away is tried again once a second, and each try fails: the
/// outage is said at once and then once per 10 s with the count of tries
/// left out, not once a second for as long as it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_gone_away_is_said_once_per_interval_and_postgres_answers() {
    let dir = TestDir::new("redis-gone");
    let redis = start_redis(&dir, &[]);
    let (gateway, upstream, _schema, _dir) = gateway_through("redis-gone", &redis).await;
    let client = gateway.client();
    let first = client.post("/v1/charges", Some("before"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    drop(redis);
    let until = Instant::now() + Duration::from_millis(3500);
    let mut n = 0;
    while Instant::now() < until {
        let key = format!("gone-{n}");
        let reply = client.post("/v1/charges", Some(&key), "{}").await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        assert_eq!(upstream.executions(&key), 1);
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = gateway.log_text();
    assert_eq!(
        lines_with(&log, "redis unavailable"),
        1,
        "one line for an outage of 3.5 s:\n{log}"
    );
}

/// A Redis whose host name does not resolve (RFC 6761 `.invalid`, a typo in
/// the URL, a Service not created yet): Postgres answers, and the warning
/// names the host and port the gateway could not reach, never the URL's
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_host_that_does_not_resolve_is_named_in_the_warning() {
    let url = "redis://:sesame@no-such-redis.invalid:6390";
    let (gateway, upstream, _schema, _dir) = gateway_at("redis-no-name", url).await;
    let reply = gateway.client().post("/v1/charges", Some("k"), "{}").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(upstream.executions("k"), 1);
    let line = gateway
        .logged_line("redis unavailable", Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("no warning:\n{}", gateway.log_text()));
    assert!(
        line.contains("redis at no-such-redis.invalid:6390: "),
        "names the host and port: {line}"
    );
    assert!(!line.contains("sesame"), "{line}");
}

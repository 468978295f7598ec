//! Test support for the PostgreSQL (and Redis) backends: every test gets its
//! own schema in the `test` database and its own Redis key prefix, so tests
//! run in parallel against the machine's one PostgreSQL and one Redis.
//!
//! Base URLs: `IDEMGATE_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `IDEMGATE_TEST_REDIS_URL`
//! (default `redis://127.0.0.1:6379`). A service that is not there fails the
//! test: nothing is skipped silently (`scripts/test` starts a throwaway
//! server of each for its run, scripts/lib/services.sh).
#![allow(dead_code)]

pub mod messages;
pub mod no_options;
pub mod switch;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemgate::config::{PostgresStoreConfig, RedisConfig};

pub fn base_url() -> String {
    std::env::var("IDEMGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn redis_url() -> String {
    std::env::var("IDEMGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A unique name per test in this run, e.g. `idemgate_test_4242_7`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Where `base_url()` points (for a relay in front of it).
pub fn server_addr() -> std::net::SocketAddr {
    let config: tokio_postgres::Config = base_url().parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = if host == "localhost" {
        "127.0.0.1".into()
    } else {
        host
    };
    format!("{host}:{port}").parse().unwrap()
}

/// `url` with its host and port replaced by `addr`.
pub fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let server = server_addr();
    let replaced = url.replacen(&server.to_string(), &addr.to_string(), 1);
    assert_ne!(
        replaced, url,
        "write IDEMGATE_TEST_PG_URL as postgres://user@IP:PORT/db"
    );
    replaced
}

/// `base_url()` with `search_path` set to `schema` (URL-encoded startup
/// option), and the schema's name as `application_name` so a test can find
/// (and cut) its own sessions in `pg_stat_activity` without touching others.
pub fn url_in_schema(schema: &str) -> String {
    let sep = if base_url().contains('?') { '&' } else { '?' };
    format!(
        "{}{sep}options=-c%20search_path%3D{schema}&application_name={schema}",
        base_url()
    )
}

/// Terminates every session opened with `application_name = name`; returns how many.
pub async fn terminate_sessions(name: &str) -> i64 {
    count_sessions("count(pg_terminate_backend(pid))", name).await
}

/// How many sessions were opened with `application_name = name`.
pub async fn sessions(name: &str) -> i64 {
    count_sessions("count(*)", name).await
}

/// `SELECT {count}` over the sessions opened with `application_name = name`
/// (this one left out), on a fresh connection.
async fn count_sessions(count: &str, name: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let sql = format!(
        "SELECT {count} FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()"
    );
    let row = client.query_one(&sql, &[&name]).await.unwrap();
    drop(client);
    let _ = task.await;
    row.get(0)
}

/// Runs SQL on a fresh connection to the base database.
pub async fn admin_sql(sql: &str) {
    let (client, conn) = tokio_postgres::connect(&base_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL must be running at {} (scripts/test starts one for its run; else set IDEMGATE_TEST_PG_URL): {e}",
                base_url()
            )
        });
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.unwrap();
    drop(client);
    let _ = task.await;
}

/// A schema that exists for the life of the value, dropped (with its tables)
/// on drop.
pub struct TestSchema {
    pub name: String,
}

impl TestSchema {
    pub async fn create() -> TestSchema {
        let name = unique("idemgate_test");
        admin_sql(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .await;
        TestSchema { name }
    }

    pub fn url(&self) -> String {
        url_in_schema(&self.name)
    }

    pub fn config(&self) -> PostgresStoreConfig {
        PostgresStoreConfig {
            url: self.url(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            migrate: true,
            sweep_interval: Duration::from_secs(60),
            sweep_batch: 1000,
            redis: None,
            encryption: Vec::new(),
        }
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        admin_sql_from_drop(format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// `admin_sql` from a `Drop`, which runs inside the test's runtime: on a
/// thread of its own, waited for.
fn admin_sql_from_drop(sql: String) {
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(admin_sql(&sql));
        }
    })
    .join();
}

pub fn redis_config(prefix: &str) -> RedisConfig {
    RedisConfig {
        url: redis_url(),
        key_prefix: prefix.to_owned(),
        ca: None,
    }
}

/// Deletes every Redis key under `prefix` (our stand-in for FLUSHALL, which
/// would disturb tests running beside this one).
pub async fn redis_flush_prefix(prefix: &str) {
    let client = redis::Client::open(redis_url()).unwrap();
    // Generous deadlines, not the crate's 1 s / 500 ms: a loaded CI machine
    // (three gateways storming in this process) can starve the runtime that
    // long, and the crate's timeout would fail a test that is not at fault.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(15)))
        .set_response_timeout(Some(Duration::from_secs(15)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "Redis must be running at {} (scripts/test starts one for its run; else set IDEMGATE_TEST_REDIS_URL): {e}",
                redis_url()
            )
        });
    // SCAN, not KEYS: never block the Redis other tests share.
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// A Redis key prefix of its own, whose keys are deleted on drop (also when
/// the test fails).
pub struct RedisPrefix(pub String);

impl RedisPrefix {
    pub fn new(tag: &str) -> RedisPrefix {
        RedisPrefix(format!("{}:", unique(tag)))
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let prefix = self.0.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(redis_flush_prefix(&prefix));
            }
        })
        .join();
    }
}

/// What a Postgres-backed test store must outlive: its schema, and the Redis
/// keys of its prefix (deleted on drop). Use with `OwnedStore`.
pub struct SchemaGuard {
    pub schema: TestSchema,
    pub redis_prefix: Option<String>,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        if let Some(prefix) = self.redis_prefix.take() {
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(redis_flush_prefix(&prefix));
                }
            })
            .join();
        }
    }
}

/// A login role of its own (a superuser, as the base URL's user is), so a
/// test can change what its sessions start with (`ALTER ROLE ... SET`)
/// without touching any other test's. Dropped with what it owns.
pub struct TestRole {
    pub name: String,
}

impl TestRole {
    pub async fn create() -> TestRole {
        let name = unique("idemgate_role");
        admin_sql(&format!("CREATE ROLE {name} LOGIN SUPERUSER")).await;
        TestRole { name }
    }

    /// A login role that is no superuser: it has only what `grants` (SQL
    /// run right after it is made, given its name) gives it.
    pub async fn limited(grants: impl FnOnce(&str) -> String) -> TestRole {
        let name = unique("idemgate_role");
        admin_sql(&format!("CREATE ROLE {name} LOGIN; {}", grants(&name))).await;
        TestRole { name }
    }

    /// `url` with this role as its user (and no password: the test server
    /// trusts local connections).
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
        let host = rest.split_once('@').map_or(rest, |(_, host)| host);
        format!("{scheme}://{}@{host}", self.name)
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        admin_sql_from_drop(format!(
            "DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}",
            self.name
        ));
    }
}

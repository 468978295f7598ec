//! Stored answers sealed at rest (`[store.encryption]`): what reaches the
//! disk, the database and Redis, rotation, lost keys, and `check`'s refusals.
//! Each test runs the real binary; Postgres and Redis are the machine's, one
//! schema and one key prefix per test.

mod common;
mod pg_support;

use std::process::Command;

use common::config::{Config, Route, Store, Upstream};
use common::{Client, GatewayProcess, MockUpstream, Reply, TestDir};
use pg_support::switch::Switch;
use pg_support::{RedisPrefix, TestSchema, redis_url};

/// 32-byte keys in base64 (`openssl rand -base64 32` would do as well).
const KEY_A: &str = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=";
const KEY_B: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";
const TOKEN: &str = "protect-admin-token-0123456789";

/// The embedded store, `/admin/*` guarded by `TOKEN`.
fn embedded() -> Config {
    Config::new()
        .server("shutdown_grace", "1s")
        .admin_token_env(common::admin::TOKEN_ENV)
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"))
}

fn envs() -> Vec<(&'static str, &'static str)> {
    vec![
        ("IDEMGATE_TEST_KEY_A", KEY_A),
        ("IDEMGATE_TEST_KEY_B", KEY_B),
        (common::admin::TOKEN_ENV, TOKEN),
    ]
}

/// `[store.encryption]` as text, for the `check` test that counts lines.
fn encryption(vars: &[&str]) -> String {
    if vars.is_empty() {
        return String::new();
    }
    let list: Vec<String> = vars.iter().map(|v| format!("\"{v}\"")).collect();
    format!("\n[store.encryption]\nkeys_env = [{}]\n", list.join(", "))
}

/// The upstream names the query in its body: the marker is in every answer.
async fn charge(client: &Client, key: &str, marker: &str) -> Reply {
    client
        .post(&format!("/v1/charges?card={marker}"), Some(key), "{}")
        .await
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The bytes of the embedded file and of its write-ahead log.
fn embedded_bytes(dir: &TestDir) -> Vec<u8> {
    let mut bytes = Vec::new();
    for file in ["store.db", "store.db-wal"] {
        if let Ok(mut read) = std::fs::read(dir.path(file)) {
            bytes.append(&mut read);
        }
    }
    assert!(!bytes.is_empty(), "the embedded store file is missing");
    bytes
}

/// Starts a gateway on `base` with `[store.encryption]` listing `vars`.
fn start(dir: &TestDir, upstream: &MockUpstream, base: &Config, vars: &[&str]) -> GatewayProcess {
    let config = base.clone().with_store(|store| store.encryption(vars));
    GatewayProcess::start_with_env(dir, &upstream.url(), &config, &envs())
}

/// Rewrites the running gateway's config as `base` with `[store.encryption]`
/// listing `vars`, and restarts it on the same ports and store.
fn restart_with(gateway: &mut GatewayProcess, base: &Config, vars: &[&str]) -> Client {
    gateway.write_config(&base.clone().with_store(|store| store.encryption(vars)));
    gateway.restart();
    // A new client: the old one's pooled connections died with the process.
    gateway.client()
}

/// The id a key is logged and stored under.
fn key_id(base64_key: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_key)
        .unwrap();
    idemgate::store::seal::key_id(&bytes.try_into().unwrap())
}

/// `idemgate_store_errors_total{backend=BACKEND,op=OP}` on the admin plane.
async fn store_errors(gateway: &GatewayProcess, backend: &str, op: &str) -> f64 {
    let metrics = gateway.admin_client().get("/metrics").await.text();
    let series = format!("idemgate_store_errors_total{{backend=\"{backend}\",op=\"{op}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
        .unwrap_or_else(|| panic!("no {series}in {metrics}"))
}

fn assert_replay(reply: &Reply, marker: &str) {
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.header("idempotent-replayed"), Some("true"));
    assert!(reply.text().contains(marker), "{}", reply.text());
}

#[tokio::test]
async fn embedded_file_and_wal_hold_no_answer_bytes_when_sealed_and_replay_after_restart() {
    let upstream = MockUpstream::start().await;
    for sealed in [true, false] {
        let dir = TestDir::new("sealed-embedded");
        let vars: &[&str] = if sealed {
            &["IDEMGATE_TEST_KEY_A"]
        } else {
            &[]
        };
        let mut gateway = start(&dir, &upstream, &embedded(), vars);
        let marker = format!("MARKER{}x{sealed}", std::process::id());
        let first = charge(&gateway.client(), "k1", &marker).await;
        assert_eq!(first.status, 201);
        assert_eq!(first.header("idempotent-replayed"), Some("false"));
        assert!(first.text().contains(&marker));
        let location = first.header("location").unwrap().to_owned();
        // Read while serving (the log not yet folded into the file) and
        // after a restart (folded in).
        let on_disk = contains(&embedded_bytes(&dir), &marker);
        assert_eq!(
            on_disk, !sealed,
            "sealed={sealed}: marker on disk={on_disk}"
        );

        gateway.restart();
        let again = charge(&gateway.client(), "k1", &marker).await;
        assert_replay(&again, &marker);
        assert_eq!(again.header("location"), Some(location.as_str()));
        assert_eq!(again.body, first.body);
        assert_eq!(upstream.executions("k1"), 1);
        let on_disk = contains(&embedded_bytes(&dir), &marker);
        assert_eq!(on_disk, !sealed, "after restart, sealed={sealed}");
        drop(gateway);
        // Each round used key "k1" on its own store: start the count over.
        upstream.counters.by_key.lock().unwrap().clear();
    }
}

/// Clear records from before encryption, rotation, a removed key, purge,
/// and encryption turned off again: one store through its whole life.
#[tokio::test]
async fn rotation_lost_keys_purge_and_turning_encryption_on_and_off() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("sealed-rotation");
    let base = embedded();
    let mut gateway = start(&dir, &upstream, &base, &[]);
    let mut client = gateway.client();
    assert_eq!(charge(&client, "clear", "M-clear").await.status, 201);

    // On over an existing store: the clear record still replays.
    client = restart_with(&mut gateway, &base, &["IDEMGATE_TEST_KEY_A"]);
    assert_replay(&charge(&client, "clear", "M-clear").await, "M-clear");
    assert_eq!(charge(&client, "old", "M-old").await.status, 201);

    // Rotation: the new key first, the old one still listed.
    client = restart_with(
        &mut gateway,
        &base,
        &["IDEMGATE_TEST_KEY_B", "IDEMGATE_TEST_KEY_A"],
    );
    assert_eq!(charge(&client, "new", "M-new").await.status, 201);
    for (key, marker) in [("clear", "M-clear"), ("old", "M-old"), ("new", "M-new")] {
        assert_replay(&charge(&client, key, marker).await, marker);
    }

    // The old key removed: its record is refused, fail closed, and logged.
    client = restart_with(&mut gateway, &base, &["IDEMGATE_TEST_KEY_B"]);
    let refused = charge(&client, "old", "M-old").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "store-unavailable");
    assert!(refused.header("retry-after").is_some());
    // Told apart from a store that cannot be reached.
    let detail = refused.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(detail.contains("cannot be opened"), "{detail}");
    assert!(!refused.text().contains("M-old"));
    assert_eq!(upstream.executions("old"), 1, "never run again");
    assert_replay(&charge(&client, "new", "M-new").await, "M-new");
    let log = gateway.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("cannot be opened"))
        .unwrap_or_else(|| panic!("no error line: {log}"));
    assert!(line.contains("ERROR"), "{line}");
    // The key id names the key the answer needs; the start line maps ids
    // to variables.
    let id_a = key_id(KEY_A);
    assert!(line.contains(&id_a), "{line}");
    assert!(
        log.lines().any(|l| l.contains("store encryption on")
            && l.contains(&format!("{id_a} (IDEMGATE_TEST_KEY_A)"))),
        "{log}"
    );
    assert!(!line.contains("=old"), "the raw idempotency key: {line}");
    // A start line with one key names no keys "also opening".
    let id_b = key_id(KEY_B);
    for start in log.lines().filter(|l| l.contains("store encryption on")) {
        let both = start.contains(&id_a) && start.contains(&id_b);
        assert_eq!(start.contains("also_opening"), both, "{start}");
    }
    for secret in [KEY_A, KEY_B] {
        assert!(!log.contains(secret), "a key in the log: {log}");
    }

    // `keys purge` frees it: the next request runs.
    let admin = gateway.admin_client();
    let auth = common::admin::bearer(TOKEN);
    let shown = admin
        .send(
            "GET",
            "/admin/keys/charges/old",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(shown.status, 200, "status and times stay readable");
    assert_eq!(shown.json()[0]["status"], 201);
    let purged = admin
        .send(
            "DELETE",
            "/admin/keys/charges/old",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(purged.status, 204);
    let rerun = charge(&client, "old", "M-old").await;
    assert_eq!(rerun.status, 201);
    assert_eq!(rerun.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("old"), 2);

    // Off again: sealed records answer 503, clear ones still replay.
    client = restart_with(&mut gateway, &base, &[]);
    let sealed = charge(&client, "new", "M-new").await;
    assert_eq!(sealed.status, 503);
    assert_eq!(sealed.json()["code"], "store-unavailable");
    assert_replay(&charge(&client, "clear", "M-clear").await, "M-clear");
    assert_eq!(upstream.executions("new"), 1);
}

/// `on_store_error = "pass"` forwards when the store is down; a record it
/// cannot open exists, so it must not be forwarded again.
#[tokio::test]
async fn an_unopenable_record_is_refused_even_when_store_errors_pass() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("sealed-pass");
    let base = embedded().defaults("on_store_error", "pass");
    let mut gateway = start(&dir, &upstream, &base, &["IDEMGATE_TEST_KEY_A"]);
    assert_eq!(charge(&gateway.client(), "k", "M").await.status, 201);
    let client = restart_with(&mut gateway, &base, &["IDEMGATE_TEST_KEY_B"]);
    assert_eq!(store_errors(&gateway, "embedded", "open").await, 0.0);
    let refused = charge(&client, "k", "M").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("idempotency-degraded"), None);
    assert_eq!(upstream.executions("k"), 1);
    // Counted as an answer that did not open, not as a store that is down.
    assert_eq!(store_errors(&gateway, "embedded", "open").await, 1.0);
    assert_eq!(store_errors(&gateway, "embedded", "reserve").await, 0.0);

    // Its retries, however many, are each counted and refused, but logged
    // once with the key id the answer needs (docs/operating.md#failures-that-repeat).
    for _ in 0..200 {
        assert_eq!(charge(&client, "k", "M").await.status, 503);
    }
    assert_eq!(store_errors(&gateway, "embedded", "open").await, 201.0);
    let log = gateway.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot be opened"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", lines.join("\n"));
    assert!(lines[0].contains(&key_id(KEY_A)), "{}", lines[0]);
}

/// A stored answer's row in the embedded file, changed behind the
/// gateway's back by `edit(headers, body)`: a damaged disk, a restore gone
/// wrong, a hand edit.
fn edit_stored_row(dir: &TestDir, key: &str, edit: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>)) {
    let conn = rusqlite::Connection::open(dir.path("store.db")).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    let (mut headers, mut body): (Vec<u8>, Vec<u8>) = conn
        .query_row(
            "SELECT headers, body FROM records WHERE key = ?1",
            [key],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    edit(&mut headers, &mut body);
    conn.execute(
        "UPDATE records SET headers = ?1, body = ?2 WHERE key = ?3",
        rusqlite::params![headers, body, key],
    )
    .unwrap();
}

/// A clear answer whose header block was damaged in the file is refused
/// 503 with a detail that says so, counted as an answer that did not open,
/// never forwarded again (even with `on_store_error = "pass"`: the record
/// exists, so the request ran), logged once; a purge frees the key.
#[tokio::test]
async fn a_damaged_clear_answer_is_refused_not_forwarded_and_purged() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("clear-damaged");
    let base = embedded().defaults("on_store_error", "pass");
    let gateway = start(&dir, &upstream, &base, &[]);
    let client = gateway.client();
    assert_eq!(charge(&client, "k", "M").await.status, 201);
    // Two pairs announced, one there.
    edit_stored_row(&dir, "k", |headers, _| {
        let count = u32::from_be_bytes(headers[..4].try_into().unwrap());
        headers[..4].copy_from_slice(&(count + 1).to_be_bytes());
    });
    for _ in 0..3 {
        let refused = charge(&client, "k", "M").await;
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert_eq!(refused.json()["code"], "store-unavailable");
        assert_eq!(refused.header("idempotency-degraded"), None);
        assert!(refused.text().contains("damaged"), "{}", refused.text());
    }
    assert_eq!(upstream.executions("k"), 1, "never run again");
    assert_eq!(store_errors(&gateway, "embedded", "open").await, 3.0);
    assert_eq!(store_errors(&gateway, "embedded", "reserve").await, 0.0);
    let log = gateway.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stored answer cannot be read"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", lines.join("\n"));
    assert!(lines[0].contains("headers"), "{}", lines[0]);
    let auth = common::admin::bearer(TOKEN);
    let purged = gateway
        .admin_client()
        .send(
            "DELETE",
            "/admin/keys/charges/k",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(purged.status, 204);
    assert_eq!(charge(&client, "k", "M").await.status, 201);
    assert_eq!(upstream.executions("k"), 2);
}

/// One header pair as the embedded file encodes it (u32 lengths).
fn header_pair(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut pair = Vec::new();
    for part in [name, value] {
        pair.extend_from_slice(&(part.len() as u32).to_be_bytes());
        pair.extend_from_slice(part);
    }
    pair
}

/// A sealed answer damaged in the store is refused like one whose key is
/// gone, whatever was damaged: the ciphertext, or the mark that says it is
/// sealed (never replayed as if it were a clear answer, its ciphertext
/// handed to the client as the body). Logged once; a purge frees it.
#[tokio::test]
async fn a_damaged_sealed_record_is_refused_logged_once_and_purged() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("sealed-damaged");
    let gateway = start(&dir, &upstream, &embedded(), &["IDEMGATE_TEST_KEY_A"]);
    let client = gateway.client();
    for key in ["body", "extra-header", "binary-id"] {
        assert_eq!(charge(&client, key, "M-dmg").await.status, 201);
    }
    edit_stored_row(&dir, "body", |_, body| {
        let last = body.len() - 1;
        body[last] ^= 1;
    });
    // The sealed pair kept, one more header after it.
    edit_stored_row(&dir, "extra-header", |headers, _| {
        headers[..4].copy_from_slice(&2u32.to_be_bytes());
        headers.extend(header_pair(b"x-extra", b"1"));
    });
    // The key id no longer text.
    edit_stored_row(&dir, "binary-id", |headers, _| {
        let mut damaged = 1u32.to_be_bytes().to_vec();
        damaged.extend(header_pair(b":idemgate-sealed", &[0xff; 16]));
        *headers = damaged;
    });
    for key in ["body", "extra-header", "binary-id"] {
        for _ in 0..3 {
            let refused = charge(&client, key, "M-dmg").await;
            assert_eq!(refused.status, 503, "{key}: {}", refused.text());
            assert_eq!(refused.json()["code"], "store-unavailable", "{key}");
            assert!(
                refused.text().contains("cannot be opened"),
                "{key}: {}",
                refused.text()
            );
        }
        assert_eq!(upstream.executions(key), 1, "{key} ran again");
    }
    let log = gateway.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stored answer cannot be opened"))
        .collect();
    // Nine refusals on one route within the interval: one line.
    assert_eq!(lines.len(), 1, "{}", lines.join("\n"));
    assert!(lines[0].contains("does not authenticate"), "{}", lines[0]);

    let admin = gateway.admin_client();
    let auth = common::admin::bearer(TOKEN);
    for key in ["body", "extra-header", "binary-id"] {
        let path = format!("/admin/keys/charges/{key}");
        let purged = admin
            .send("DELETE", &path, &[("authorization", &auth)], "")
            .await;
        assert_eq!(purged.status, 204, "{key}");
        let rerun = charge(&client, key, "M-dmg").await;
        assert_eq!(rerun.status, 201, "{key}");
        assert_eq!(rerun.header("idempotent-replayed"), Some("false"));
        assert_eq!(upstream.executions(key), 2, "{key}");
    }
}

/// Postgres at `pg_url`, Redis at `redis_url` under `prefix`.
fn postgres(pg_url: &str, redis_url: &str, prefix: &str) -> Config {
    Config::new()
        .server("shutdown_grace", "1s")
        .store(
            Store::postgres(pg_url)
                .set("pool_size", 4)
                .redis(redis_url, prefix),
        )
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "10s")
        .route(Route::api("charges", "/v1/charges"))
}

/// Every value Redis holds under `prefix` (SCAN: never block the Redis
/// other tests share).
/// The values under `prefix` once there are any (a completion writes
/// Redis after Postgres, so a moment after its answer); at most 2.5 s.
async fn redis_values_soon(prefix: &str) -> Vec<Vec<u8>> {
    for _ in 0..50 {
        let cached = redis_values(prefix).await;
        if !cached.is_empty() {
            return cached;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("nothing reached Redis");
}

async fn redis_values(prefix: &str) -> Vec<Vec<u8>> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut values = Vec::new();
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
        for key in keys {
            let value: Option<Vec<u8>> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            values.extend(value);
        }
        if next == 0 {
            return values;
        }
        cursor = next;
    }
}

/// The raw stored columns of every row, as the database has them.
async fn postgres_rows(schema: &str) -> Vec<u8> {
    let (client, conn) = tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let rows = client
        .query(
            &format!("SELECT header_names, header_values, body FROM {schema}.idemgate_records"),
            &[],
        )
        .await
        .unwrap();
    assert!(!rows.is_empty(), "no record in {schema}");
    let mut bytes = Vec::new();
    for row in rows {
        let names: Option<Vec<String>> = row.get(0);
        let values: Option<Vec<Vec<u8>>> = row.get(1);
        let body: Option<Vec<u8>> = row.get(2);
        for name in names.unwrap_or_default() {
            bytes.extend_from_slice(name.as_bytes());
        }
        for value in values.unwrap_or_default() {
            bytes.extend_from_slice(&value);
        }
        bytes.extend_from_slice(&body.unwrap_or_default());
    }
    drop(client);
    let _ = task.await;
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_and_redis_values_hold_no_answer_bytes_when_sealed() {
    let upstream = MockUpstream::start().await;
    for sealed in [true, false] {
        let schema = TestSchema::create().await;
        let prefix = RedisPrefix::new("idemgate-sealed");
        let dir = TestDir::new("sealed-pg");
        let base = postgres(&schema.url(), &redis_url(), &prefix.0);
        let vars: &[&str] = if sealed {
            &["IDEMGATE_TEST_KEY_A"]
        } else {
            &[]
        };
        let mut gateway = start(&dir, &upstream, &base, vars);
        let marker = format!("PGMARKER{}x{sealed}", std::process::id());
        let key = format!("pg-{sealed}");
        let first = charge(&gateway.client(), &key, &marker).await;
        assert_eq!(first.status, 201, "{}", first.text());
        // Postgres replays it once and writes it back to Redis.
        gateway.restart();
        assert_replay(&charge(&gateway.client(), &key, &marker).await, &marker);
        let rows = postgres_rows(&schema.name).await;
        assert_eq!(
            contains(&rows, &marker),
            !sealed,
            "postgres, sealed={sealed}"
        );
        assert!(
            contains(&rows, "location") != sealed,
            "header names are sealed too"
        );
        let cached = redis_values_soon(&prefix.0).await;
        assert_eq!(
            cached.iter().any(|v| contains(v, &marker)),
            !sealed,
            "redis, sealed={sealed}"
        );
        // Served from Redis after another restart: still opened.
        gateway.restart();
        assert_replay(&charge(&gateway.client(), &key, &marker).await, &marker);
        assert_eq!(upstream.executions(&key), 1);
    }
}

/// A Redis copy that no listed key opens, while Postgres cannot be asked:
/// the copy shows the request ran (it names this record and its
/// fingerprint matched), so even `on_store_error = "pass"` must not forward
/// it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unopenable_redis_copy_is_refused_while_postgres_is_down_even_when_errors_pass() {
    let upstream = MockUpstream::start().await;
    let schema = TestSchema::create().await;
    let prefix = RedisPrefix::new("idemgate-sealed-down");
    let switch = Switch::start(pg_support::server_addr()).await;
    let url = pg_support::via(&schema.url(), switch.addr);
    let dir = TestDir::new("sealed-pg-down");
    let base = postgres(&url, &redis_url(), &prefix.0).defaults("on_store_error", "pass");
    let mut gateway = start(&dir, &upstream, &base, &["IDEMGATE_TEST_KEY_A"]);
    assert_eq!(charge(&gateway.client(), "k", "M").await.status, 201);
    redis_values_soon(&prefix.0).await;

    // The key that sealed it removed, then Postgres out of reach.
    let client = restart_with(&mut gateway, &base, &["IDEMGATE_TEST_KEY_B"]);
    switch.cut();
    let refused = charge(&client, "k", "M").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["code"], "store-unavailable");
    assert_eq!(refused.header("idempotency-degraded"), None);
    assert_eq!(upstream.executions("k"), 1, "never run again");
    assert_eq!(store_errors(&gateway, "postgres", "open").await, 1.0);
    let log = gateway.log_text();
    assert!(
        log.lines().any(|l| l.contains("ERROR")
            && l.contains(
                "cached copy of a stored answer cannot be opened and the store cannot be asked"
            )),
        "{log}"
    );
    // A key Redis holds nothing of still passes, degraded, as the route says.
    let passed = charge(&client, "other", "M").await;
    assert_eq!(passed.status, 201, "{}", passed.text());
    assert_eq!(passed.header("idempotency-degraded"), Some("true"));
}

const ROUTE: &str = "[upstreams.api]\nurl = \"http://127.0.0.1:9\"\n\n[[routes]]\nname = \"r\"\nupstream = \"api\"\nmatch = { path_prefix = \"/\" }\n\n";

/// `idemgate check` on a config whose keys are wrong: exit 1, the field and
/// the variable named, the value never printed.
#[test]
fn check_refuses_bad_keys_and_never_prints_them() {
    let dir = TestDir::new("sealed-check");
    let config = dir.path("idemgate.toml");
    let short = "c2hvcnQta2V5"; // "short-key": 9 bytes
    let not_base64 = "not*base64*at*all*not*base64*at*all*not*bas";
    // `openssl rand -hex 32`: 64 hex digits, which base64 reads as 48 bytes.
    let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let cases: [(&[&str], &str, &str); 6] = [
        (&["K_SHORT"], "store.encryption.keys_env[0]", "9 bytes"),
        (
            &["K_HEX"],
            "store.encryption.keys_env[0]",
            "K_HEX holds 64 hex digits, not base64",
        ),
        (
            &["K_GOOD", "K_JUNK"],
            "store.encryption.keys_env[1]",
            "not base64",
        ),
        (
            &["K_UNSET"],
            "store.encryption.keys_env[0]",
            "K_UNSET is not set",
        ),
        (
            &["K_GOOD", "K_SAME"],
            "store.encryption.keys_env[1]",
            "same key as K_GOOD",
        ),
        (
            &["K_GOOD", "K_GOOD"],
            "store.encryption.keys_env[1]",
            "listed twice",
        ),
    ];
    for (vars, field, message) in cases {
        let text = format!(
            "{ROUTE}[store]\npath = \"{}\"\n{}",
            dir.path("x.db").display(),
            encryption(vars)
        );
        std::fs::write(&config, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check", "-c"])
            .arg(&config)
            .env("K_SHORT", short)
            .env("K_HEX", hex)
            .env("K_JUNK", not_base64)
            .env("K_GOOD", KEY_A)
            .env("K_SAME", format!("  {KEY_A}\n"))
            .env_remove("K_UNSET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{vars:?}: {stderr}");
        assert!(stderr.contains(field), "{vars:?}: {stderr}");
        assert!(stderr.contains(message), "{vars:?}: {stderr}");
        assert!(stderr.contains(":13:"), "the line of keys_env: {stderr}");
        for secret in [short, hex, not_base64, KEY_A] {
            assert!(!stderr.contains(secret), "{vars:?} printed a key: {stderr}");
        }
    }
    // A value that is not UTF-8 is said to be so, not to be unset.
    let text = format!(
        "{ROUTE}[store]\npath = \"{}\"\n{}",
        dir.path("x.db").display(),
        encryption(&["K_BYTES"])
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c"])
        .arg(&config)
        .env(
            "K_BYTES",
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"q83v\xff"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "store.encryption.keys_env[0]: environment variable K_BYTES is not valid UTF-8"
        ),
        "{stderr}"
    );
    // And a good one passes.
    std::fs::write(
        &config,
        format!(
            "{ROUTE}[store]\npath = \"{}\"\n{}",
            dir.path("x.db").display(),
            encryption(&["K_GOOD", "K_OTHER"])
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c"])
        .arg(&config)
        .env("K_GOOD", KEY_A)
        .env("K_OTHER", KEY_B)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

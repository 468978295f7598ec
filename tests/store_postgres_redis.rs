//! The conformance suite against Redis in front of Postgres (one schema and
//! one Redis key prefix per test), plus the fast path's own promises: hits
//! skip Postgres, and losing Redis never changes an answer.

mod common;
mod pg_support;
mod store_conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::Digest;

use common::owned_store::OwnedStore;
use idemgate::config::{RedisConfig, StoreKey};
use idemgate::store::seal::{Keys, SealedStore};
use idemgate::store::{
    CacheHooks, CachedStore, Lookup, PostgresStore, ReplayCache, Reservation, Store, StoreError,
};
use pg_support::{RedisPrefix, SchemaGuard, TestSchema, redis_config, redis_flush_prefix, unique};
use store_conformance::{id, reserved, response};

const LONG: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Counts {
    hit: AtomicU64,
    miss: AtomicU64,
    error: AtomicU64,
}

impl Counts {
    fn get(&self) -> (u64, u64, u64) {
        (
            self.hit.load(Ordering::SeqCst),
            self.miss.load(Ordering::SeqCst),
            self.error.load(Ordering::SeqCst),
        )
    }
}

async fn cached(redis: RedisConfig) -> (Arc<dyn Store>, Arc<Counts>, TestSchema) {
    let schema = TestSchema::create().await;
    let counts = Arc::new(Counts::default());
    let hook = counts.clone();
    let authority = PostgresStore::connect(&schema.config()).await.unwrap();
    let store = CachedStore::new(
        authority,
        &redis,
        CacheHooks::lookups(Arc::new(move |lookup| {
            let counter = match lookup {
                Lookup::Hit => &hook.hit,
                Lookup::Miss => &hook.miss,
                Lookup::Error => &hook.error,
            };
            counter.fetch_add(1, Ordering::SeqCst);
        })),
    )
    .unwrap();
    (Arc::new(store), counts, schema)
}

async fn fresh() -> Arc<dyn Store> {
    let prefix = format!("{}:", unique("idemgate-test"));
    let (store, _, schema) = cached(redis_config(&prefix)).await;
    Arc::new(OwnedStore {
        store,
        guard: SchemaGuard {
            schema,
            redis_prefix: Some(prefix),
        },
    })
}

store_conformance::conformance_tests!(fresh().await);

/// With the in-memory copies in front, as `serve` opens it: concurrent
/// replays of one large answer share one lookup's result (from Redis here,
/// where the completion wrote it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replays_of_a_large_answer_share_one_read() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, _, schema) = cached(redis_config(&prefix.0)).await;
    let store = Arc::new(OwnedStore {
        store: Arc::new(ReplayCache::new(OwnedStore { store, guard: () }, 1 << 20)),
        guard: SchemaGuard {
            schema,
            redis_prefix: None,
        },
    });
    store_conformance::concurrent_replays_of_a_large_answer_share_one_read(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replays_come_from_redis_and_survive_postgres_losing_the_connection() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    assert_eq!(counts.get(), (0, 1, 0));
    for _ in 0..3 {
        assert_eq!(
            store.reserve(&id("k"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
    }
    assert_eq!(counts.get(), (3, 1, 0));
    // The schema (the authority's data) disappears: a Redis hit is final and
    // still replays.
    drop(schema);
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flushed_cache_falls_back_to_postgres_and_is_refilled() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    redis_flush_prefix(&prefix.0).await;
    // Miss → Postgres replays (no second reservation) and refills.
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    assert_eq!(counts.get(), (1, 2, 0));
    // Another fingerprint is a miss for the cache and a mismatch for Postgres.
    assert_eq!(
        store.reserve(&id("k"), "other", LONG).await.unwrap(),
        Reservation::Mismatch
    );
    // Purge removes the cached copy too: the key runs again.
    assert_eq!(store.purge("orders", "k").await.unwrap(), 1);
    reserved(&store, &id("k"), "fp", LONG).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_down_serves_from_postgres_and_counts_errors() {
    // Nothing listens there: equivalent to a stopped Redis.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = RedisConfig {
        url: format!("redis://127.0.0.1:{port}"),
        key_prefix: "unused:".into(),
        ca: None,
    };
    let (store, counts, _schema) = cached(down).await;
    let started = std::time::Instant::now();
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    for _ in 0..20 {
        assert_eq!(
            store.reserve(&id("k"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
    }
    let (hit, _, error) = counts.get();
    assert_eq!((hit, error), (0, 21));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a down redis must cost little: {:?}",
        started.elapsed()
    );
    // Purge cannot remove a cached copy it cannot reach: it says so.
    assert!(store.purge("orders", "k").await.is_err());
}

/// A store whose Redis is reached through a relay the test can cut or
/// stall, with the answer of key `k` completed and in Redis.
async fn answered_through_a_switch() -> (
    pg_support::switch::Switch,
    Arc<dyn Store>,
    Arc<Counts>,
    TestSchema,
) {
    let switch = pg_support::switch::Switch::start(redis_addr()).await;
    let prefix = RedisPrefix::new("idemgate-test");
    let via_switch = RedisConfig {
        url: format!("redis://{}", switch.addr),
        key_prefix: prefix.0.clone(),
        ca: None,
    };
    let (store, counts, schema) = cached(via_switch).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    assert_eq!(counts.get().0, 1, "the answer is in redis");
    (switch, store, counts, schema)
}

/// A purge that cannot reach Redis must leave something to retry: the
/// records stay until their cached copies are gone. (It used to delete them
/// in Postgres first; the retry then found no record, answered "none", and
/// the copy Redis still held kept replaying the purged key until its TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_refused_by_redis_can_be_retried_and_leaves_no_copy() {
    let (switch, store, _counts, _schema) = answered_through_a_switch().await;

    switch.cut();
    assert!(store.purge("orders", "k").await.is_err());
    switch.restore();
    // Until Redis answers again (reconnect, then the pause after a failure).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let purged = loop {
        match store.purge("orders", "k").await {
            Ok(n) => break n,
            Err(err) => {
                assert!(std::time::Instant::now() < deadline, "{err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(purged, 1, "the retry purges the record");
    // The key runs again: no copy left in Redis to replay it.
    reserved(&store, &id("k"), "fp", LONG).await;
}

/// A replay on another replica that read the answer from Postgres just
/// before a purge committed writes it back to Redis (`SET NX`) just after
/// the purge deleted the copies: the purged answer must not come back with
/// it. (It did, and replayed until its TTL, the record's retention, while
/// purging again could no longer name it.) The purge leaves a mark that
/// such a write-back does not land over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_back_that_lands_after_a_purge_does_not_bring_the_purged_answer_back() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, _counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let entry = entry_name(&prefix.0, "k");
    let mut conn = redis_conn().await;
    let copy = get_value(&mut conn, &entry).await;
    assert_eq!(store.purge("orders", "k").await.unwrap(), 1);
    // The other replica's write-back, as the store makes it.
    let _: Option<String> = redis::cmd("SET")
        .arg(&entry)
        .arg(&copy)
        .arg("PX")
        .arg(60_000)
        .arg("NX")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The purged key runs again: not replayed from that copy.
    reserved(&store, &id("k"), "fp", LONG).await;
}

/// A value of another type under one key's entry (Redis answers `WRONGTYPE`)
/// is that key's problem: it is served from Postgres, and the fast path stays
/// on for every other key. (Any error used to pause Redis for everyone, and
/// log it as unavailable, as if the connection had failed.) The replay that
/// Postgres served replaces the value, so the next one is a hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_of_another_type_under_one_key_does_not_stop_the_fast_path() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    for key in ["bad", "good"] {
        let lease = reserved(&store, &id(key), "fp", LONG).await;
        store.complete(&lease, &response(), LONG).await.unwrap();
    }
    let entry = entry_name(&prefix.0, "bad");
    let mut conn = redis_conn().await;
    let () = redis::cmd("DEL")
        .arg(&entry)
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::cmd("RPUSH")
        .arg(&entry)
        .arg("garbage")
        .query_async::<i64>(&mut conn)
        .await
        .map(drop)
        .unwrap();

    for key in ["bad", "good", "bad"] {
        assert_eq!(
            store.reserve(&id(key), "fp", LONG).await.unwrap(),
            Reservation::Completed(response()),
            "{key}"
        );
    }
    assert_eq!(counts.get(), (2, 2, 1), "(hit, miss, error)");
}

/// A string under a key's entry that does not decode is a miss, and the
/// replay Postgres serves replaces it. (The write-back used `SET NX`, which
/// never lands over a value: every replay of that key went to Postgres for
/// as long as the garbage lived, for ever without a TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_under_a_key_is_replaced_by_the_next_replay() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let entry = entry_name(&prefix.0, "k");
    let mut conn = redis_conn().await;
    set_value(&mut conn, &entry, b"\x07garbage").await;
    for _ in 0..3 {
        assert_eq!(
            store.reserve(&id("k"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
    }
    assert_eq!(counts.get(), (2, 2, 0), "(hit, miss, error)");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&entry)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "the record's retention: {ttl}");
}

/// An answer of another fingerprint left under a key's entry by an earlier
/// record (purged, then a copy written back by a replay racing the purge) is
/// replaced once Postgres replays the record that holds the key now: it no
/// longer replays the purged answer to its fingerprint (Postgres says
/// mismatch), nor sends the new one's replays to Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_answer_of_another_fingerprint_is_replaced() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    let entry = entry_name(&prefix.0, "k");
    let mut conn = redis_conn().await;
    let lease = reserved(&store, &id("k"), "old", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let stale = get_value(&mut conn, &entry).await;
    assert_eq!(store.purge("orders", "k").await.unwrap(), 1);
    let lease = reserved(&store, &id("k"), "new", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    set_value(&mut conn, &entry, &stale).await;

    for _ in 0..2 {
        assert_eq!(
            store.reserve(&id("k"), "new", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
    }
    assert_eq!(
        store.reserve(&id("k"), "old", LONG).await.unwrap(),
        Reservation::Mismatch
    );
    // (hit, miss, error): the reservations and the stale lookup miss, the
    // second replay hits, the old fingerprint misses.
    assert_eq!(counts.get(), (1, 4, 0), "(hit, miss, error)");
}

/// The Redis entry's name of ("orders", "scope-a", key): prefix, "a:",
/// SHA-256 of the length-prefixed parts.
fn entry_name(prefix: &str, key: &str) -> String {
    let mut hash = sha2::Sha256::new();
    for part in ["orders", "scope-a", key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    format!("{prefix}a:{}", hex::encode(hash.finalize()))
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(pg_support::redis_url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// The bytes Redis holds under `entry`.
async fn get_value(conn: &mut redis::aio::MultiplexedConnection, entry: &str) -> Vec<u8> {
    redis::cmd("GET")
        .arg(entry)
        .query_async(conn)
        .await
        .unwrap()
}

/// Puts `value` under `entry`, with no expiry, as a hand on the server would.
async fn set_value(conn: &mut redis::aio::MultiplexedConnection, entry: &str, value: &[u8]) {
    let () = redis::cmd("SET")
        .arg(entry)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap();
}

fn redis_addr() -> std::net::SocketAddr {
    let url = pg_support::redis_url();
    let host_port = url
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap();
    host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("write IDEMGATE_TEST_REDIS_URL as redis://IP:PORT")
}

/// Answers sealed under `key` (`[store.encryption]`) in front of Redis and
/// the schema's Postgres.
async fn sealed(schema: &TestSchema, prefix: &str, key: u8) -> Arc<dyn Store> {
    let authority = PostgresStore::connect(&schema.config()).await.unwrap();
    let cache = CachedStore::new(authority, &redis_config(prefix), CacheHooks::none()).unwrap();
    let keys = Keys::new(&[StoreKey {
        env: format!("KEY_{key}"),
        bytes: [key; 32],
    }]);
    Arc::new(SealedStore::new(cache, keys))
}

/// A copy in Redis that does not open says nothing of the record in
/// Postgres: here a copy left by an earlier record of the key (purged, then
/// written back by a replay racing the purge) under a key no longer listed,
/// over a record sealed under the current one. The record replays from
/// Postgres and the copy is replaced. (Such a copy used to refuse every
/// replay with 503, its log line telling the operator to purge a record
/// that was fine: the purge would have let the request run again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cached_copy_that_does_not_open_is_replayed_from_postgres() {
    let prefix = RedisPrefix::new("idemgate-test");
    let schema = TestSchema::create().await;
    let (before, now) = (
        sealed(&schema, &prefix.0, 1).await,
        sealed(&schema, &prefix.0, 2).await,
    );
    let entry = entry_name(&prefix.0, "k");
    let mut conn = redis_conn().await;
    let lease = reserved(&before, &id("k"), "fp", LONG).await;
    before.complete(&lease, &response(), LONG).await.unwrap();
    let stale = get_value(&mut conn, &entry).await;
    assert_eq!(now.purge("orders", "k").await.unwrap(), 1);
    let lease = reserved(&now, &id("k"), "fp", LONG).await;
    now.complete(&lease, &response(), LONG).await.unwrap();
    set_value(&mut conn, &entry, &stale).await;

    assert_eq!(
        now.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    let replaced = get_value(&mut conn, &entry).await;
    assert_ne!(replaced, stale, "the copy that does not open is replaced");
    // Only the earlier key's store is refused now, by the copy and by
    // Postgres alike.
    assert!(matches!(
        before.reserve(&id("k"), "fp", LONG).await,
        Err(StoreError::Sealed(_))
    ));
}

/// A value cut short in its body (or altered anywhere) is no answer: the
/// record replays whole from Postgres, which rewrites the value. (The body
/// ran to the end of the value, so a value cut in it used to parse, and
/// replayed the shorter body as the record's answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_cut_short_or_altered_is_no_answer() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let entry = entry_name(&prefix.0, "k");
    let mut conn = redis_conn().await;
    let whole = get_value(&mut conn, &entry).await;
    let mut altered = whole.clone();
    *altered.last_mut().unwrap() ^= 1;
    for damaged in [&whole[..whole.len() - 3], &altered[..]] {
        let () = redis::cmd("SET")
            .arg(&entry)
            .arg(damaged)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            store.reserve(&id("k"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
        let rewritten = get_value(&mut conn, &entry).await;
        assert_ne!(&rewritten[..], damaged, "the damaged value is replaced");
    }
    // Both damaged values were misses; the rewritten one hits.
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    assert_eq!(counts.get(), (1, 3, 0), "(hit, miss, error)");
}

/// A value whose TTL outlives the record it copies (lifted by hand here)
/// does not replay the record past its retention: Postgres lets the key
/// run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_past_its_records_expiry_is_no_answer() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, _counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    let retention = Duration::from_millis(500);
    store
        .complete(&lease, &response(), retention)
        .await
        .unwrap();
    let mut conn = redis_conn().await;
    let lifted: i64 = redis::cmd("PERSIST")
        .arg(entry_name(&prefix.0, "k"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(lifted, 1);
    tokio::time::sleep(retention + Duration::from_millis(200)).await;
    reserved(&store, &id("k"), "fp", LONG).await;
}

/// A value copied under another record's name (by hand, a restore gone
/// wrong) is no answer there, even for the same request under another key:
/// the fingerprint does not name the key, the value's digest does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_copied_under_another_key_is_no_answer() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, _counts, _schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&store, &id("a"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    let mut conn = redis_conn().await;
    let value = get_value(&mut conn, &entry_name(&prefix.0, "a")).await;
    let () = redis::cmd("SET")
        .arg(entry_name(&prefix.0, "b"))
        .arg(&value)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    reserved(&store, &id("b"), "fp", LONG).await;
}

/// Two deployments that share one Redis and one `key_prefix` by mistake
/// (each with its own database) see one another's values under the same
/// names: the same webhook event sent to two services, say. Neither takes
/// the other's for its own: each key runs once per deployment and replays
/// its own answer. (The second deployment used to replay the first one's
/// answer and never run the request.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_deployments_value_under_the_same_name_is_no_answer() {
    use idemgate::store::StoredResponse;
    let prefix = RedisPrefix::new("idemgate-test");
    let (first, _, first_schema) = cached(redis_config(&prefix.0)).await;
    let (second, _, _second_schema) = cached(redis_config(&prefix.0)).await;
    let lease = reserved(&first, &id("evt_1"), "fp", LONG).await;
    first.complete(&lease, &response(), LONG).await.unwrap();

    let lease = reserved(&second, &id("evt_1"), "fp", LONG).await;
    let own = StoredResponse {
        status: 202,
        ..response()
    };
    second.complete(&lease, &own, LONG).await.unwrap();
    for _ in 0..2 {
        assert_eq!(
            first.reserve(&id("evt_1"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response())
        );
        assert_eq!(
            second.reserve(&id("evt_1"), "fp", LONG).await.unwrap(),
            Reservation::Completed(own.clone())
        );
    }
    // A replica of the first deployment (its database) reads the first's
    // values as its own (the two deployments overwrite each other's value
    // under the shared name: the first's replay just put its own back).
    assert_eq!(
        first.reserve(&id("evt_1"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    let hits = Arc::new(AtomicU64::new(0));
    let counted = hits.clone();
    let replica = CachedStore::new(
        PostgresStore::connect(&first_schema.config())
            .await
            .unwrap(),
        &redis_config(&prefix.0),
        CacheHooks::lookups(Arc::new(move |lookup| {
            if lookup == Lookup::Hit {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        })),
    )
    .unwrap();
    assert_eq!(
        replica.reserve(&id("evt_1"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// A replay Postgres serves after Redis lost the copy tells the expiry the
/// completion wrote, and so does the copy it writes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refilled_copy_tells_the_expiry_the_completion_wrote() {
    let prefix = RedisPrefix::new("idemgate-test");
    let (store, counts, _schema) = cached(redis_config(&prefix.0)).await;
    for n in 0..10 {
        let key = id(&format!("k{n}"));
        let lease = reserved(&store, &key, "fp", LONG).await;
        let written = store.complete(&lease, &response(), LONG).await.unwrap();
        redis_flush_prefix(&prefix.0).await;
        let misses = counts.get().1;
        let (_, from_postgres) = store.reserve_with_expiry(&key, "fp", LONG).await.unwrap();
        assert_eq!(counts.get().1, misses + 1, "k{n}: asked Postgres");
        assert_eq!(from_postgres.unwrap().expires_at, written, "k{n}");
        let hits = counts.get().0;
        let (_, refilled) = store.reserve_with_expiry(&key, "fp", LONG).await.unwrap();
        assert_eq!(counts.get().0, hits + 1, "k{n}: a Redis hit");
        assert_eq!(refilled.unwrap().expires_at, written, "k{n}");
    }
}

/// A gateway's store on `schema` with Redis at `redis`, holding the answer
/// of ("orders", "k"), and that answer's Redis entry.
async fn answered_with_redis(schema: &TestSchema, redis: RedisConfig) -> (Arc<dyn Store>, String) {
    use idemgate::config::StoreConfig;

    let entry = entry_name(&redis.key_prefix, "k");
    let mut with_redis = schema.config();
    with_redis.redis = Some(redis);
    let gateway = idemgate::store::open(&StoreConfig::Postgres(with_redis))
        .await
        .unwrap();
    let lease = reserved(&gateway, &id("k"), "fp", LONG).await;
    gateway.complete(&lease, &response(), LONG).await.unwrap();
    assert!(entry_exists(&entry).await, "the answer is in redis");
    (gateway, entry)
}

async fn entry_exists(entry: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(entry)
        .query_async::<i64>(&mut redis_conn().await)
        .await
        .unwrap()
        == 1
}

/// Purges ("orders", "k") through a store on `schema` without Redis, as
/// `idemgate keys purge` with a file that has no `[store.redis]` does.
async fn purge_without_redis(schema: &TestSchema) {
    let config = idemgate::config::StoreConfig::Postgres(schema.config());
    let without_redis = idemgate::store::open(&config).await.unwrap();
    assert_eq!(without_redis.purge("orders", "k").await.unwrap(), 1);
}

/// Waits up to `within` for `entry` to hold no answer: gone, or the mark a
/// purge leaves (`purged:` and its own id).
async fn wait_gone(entry: &str, within: Duration, what: &str) {
    let deadline = std::time::Instant::now() + within;
    let mut conn = redis_conn().await;
    while redis::cmd("GET")
        .arg(entry)
        .query_async::<Option<Vec<u8>>>(&mut conn)
        .await
        .unwrap()
        .is_some_and(|value| !value.starts_with(b"purged:"))
    {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A purge made without the gateways' `[store.redis]` (`idemgate keys
/// purge` with a file that has none) still deletes their Redis copies: a
/// store that keeps copies in Redis deletes the purged scopes' copies when it
/// hears of the purge. (Such a copy went on replaying the purged answer, on
/// every replica, until the record's retention would have ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_made_without_redis_still_deletes_the_gateways_redis_copies() {
    let schema = TestSchema::create().await;
    let prefix = RedisPrefix::new("idemgate-test");
    let (gateway, entry) = answered_with_redis(&schema, redis_config(&prefix.0)).await;
    purge_without_redis(&schema).await;
    let still = "the purged answer's copy is still in redis";
    wait_gone(&entry, Duration::from_secs(5), still).await;
    // The key runs again.
    reserved(&gateway, &id("k"), "fp", LONG).await;
}

/// A replica that hears of a purge made without `[store.redis]` while its
/// Redis is unreachable deletes the purged scopes' copies once Redis answers
/// again. (It tried once, logged that it could not, and the copy replayed
/// the purged answer until its TTL: purging again found no record, so
/// neither it nor anything else named the copy any more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_heard_while_redis_is_down_deletes_the_copies_once_it_answers() {
    let switch = pg_support::switch::Switch::start(redis_addr()).await;
    let schema = TestSchema::create().await;
    let prefix = RedisPrefix::new("idemgate-test");
    let via_switch = RedisConfig {
        url: format!("redis://{}", switch.addr),
        key_prefix: prefix.0.clone(),
        ca: None,
    };
    let (gateway, entry) = answered_with_redis(&schema, via_switch).await;

    switch.cut();
    purge_without_redis(&schema).await;
    // Heard, and the deletion failed (the relay refuses every connection).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(entry_exists(&entry).await, "redis was unreachable");
    switch.restore();
    let still = "the purged answer's copy is still in redis once it answers";
    wait_gone(&entry, Duration::from_secs(10), still).await;
    // The key runs again.
    reserved(&gateway, &id("k"), "fp", LONG).await;
}

/// A connection that stops answering without being closed (Redis's host
/// gone without a reset, a proxy or NAT entry stuck, a failover that moved
/// the address): new connections would be answered. The gateway must give
/// up on the silent one and reconnect, or the fast path is gone until the
/// kernel gives up on the socket (many minutes; never, when something on
/// the way acknowledges the bytes), every probe costing its full deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_that_stops_answering_is_replaced_and_hits_come_back() {
    let (switch, store, counts, _schema) = answered_through_a_switch().await;

    switch.stall_open_sessions();
    let stalled_at = std::time::Instant::now();
    let mut slowest = Duration::ZERO;
    loop {
        let started = std::time::Instant::now();
        assert_eq!(
            store.reserve(&id("k"), "fp", LONG).await.unwrap(),
            Reservation::Completed(response()),
            "Postgres answers while Redis does not"
        );
        slowest = slowest.max(started.elapsed());
        if counts.get().0 > 1 {
            break;
        }
        assert!(
            stalled_at.elapsed() < Duration::from_secs(10),
            "no hit since the connection went silent {:?} ago: it is never replaced \
             (counts {:?})",
            stalled_at.elapsed(),
            counts.get()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        slowest < Duration::from_secs(1),
        "one reserve took {slowest:?}: each Redis call has a 200 ms deadline"
    );
}

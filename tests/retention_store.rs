//! Operating retention at the store level, on the embedded store and on
//! Postgres: replay ages, counts per state, and listing a route's records
//! a page at a time (docs/tuning-retention.md).

mod common;
mod pg_support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use common::owned_store::OwnedStore;
use futures_util::future::join_all;
use idemgate::store::{
    Count, CountLimits, EmbeddedStore, Kept, Lease, ListQuery, PostgresStore, RecordId,
    RecordState, Reservation, Store, StoredResponse,
};
use pg_support::{SchemaGuard, TestSchema};

const LONG: Duration = Duration::from_secs(3600);

fn temp_db(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir()
        .join(format!(
            "idemgate-retention-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
        .join("store.db")
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A clock the test moves: unix milliseconds.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn new() -> TestClock {
        TestClock(Arc::new(AtomicU64::new(1_800_000_000_000)))
    }
    fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
    fn clock(&self) -> idemgate::store::embedded::WallClock {
        let ms = self.0.clone();
        Arc::new(move || UNIX_EPOCH + Duration::from_millis(ms.load(Ordering::SeqCst)))
    }
}

fn embedded(clock: &TestClock) -> Arc<dyn Store> {
    let path = temp_db("store");
    Arc::new(OwnedStore {
        store: Arc::new(EmbeddedStore::open_with_clock(&path, clock.clock()).unwrap()),
        guard: TempDir(path),
    })
}

async fn postgres() -> (Arc<dyn Store>, String) {
    let schema = TestSchema::create().await;
    let name = schema.name.clone();
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    let store = Arc::new(OwnedStore {
        store: Arc::new(store),
        guard: SchemaGuard {
            schema,
            redis_prefix: None,
        },
    });
    (store, name)
}

fn id(route: &str, key: &str) -> RecordId {
    RecordId::new(route, "scope-a", key)
}

fn answer(status: u16, outcome_unknown: bool) -> StoredResponse {
    StoredResponse {
        status,
        headers: StoredResponse::header_list([("content-type", b"application/json".as_slice())]),
        body: Bytes::from_static(b"{}"),
        body_omitted: false,
        outcome_unknown,
    }
}

async fn reserve(store: &Arc<dyn Store>, id: &RecordId) -> Lease {
    match store.reserve(id, "fp", LONG).await.unwrap() {
        Reservation::Reserved(lease) => lease,
        other => panic!("expected a lease for {id:?}, got {other:?}"),
    }
}

async fn replay_kept(store: &Arc<dyn Store>, id: &RecordId) -> Kept {
    match store.reserve_with_expiry(id, "fp", LONG).await.unwrap() {
        (Reservation::Completed(_), Some(kept)) => kept,
        other => panic!("expected a replay of {id:?}, got {other:?}"),
    }
}

fn counted(counts: &[Count], route: &str, state: RecordState) -> u64 {
    counts
        .iter()
        .filter(|c| c.route == route && c.state == state)
        .map(|c| c.records)
        .sum()
}

/// Keys whose byte order differs from a linguistic collation's (case,
/// accents, punctuation), so that paging must not depend on one.
fn key_of(n: usize) -> String {
    match n % 4 {
        0 => format!("k-{n:05}"),
        1 => format!("K{n:05}"),
        2 => format!("é{n:05}"),
        _ => format!("_{n:05}"),
    }
}

/// 2,500 records of one route, of every state, several per creation
/// instant (`tick` is called between groups), and a few of another route.
async fn fill(store: &Arc<dyn Store>, tick: impl Fn()) -> Vec<(String, RecordState)> {
    let mut made = Vec::new();
    for group in 0..25 {
        let keys: Vec<usize> = (group * 100..(group + 1) * 100).collect();
        let leases = join_all(
            keys.iter()
                .map(|&n| async move { reserve(store, &id("orders", &key_of(n))).await }),
        )
        .await;
        join_all(leases.iter().zip(&keys).map(|(lease, &n)| async move {
            let answer = match n % 10 {
                0 => return,
                1 => answer(504, true),
                // The upstream's own 502: completed, not outcome-unknown.
                2 => answer(502, false),
                _ => answer(201, false),
            };
            store.complete(lease, &answer, LONG).await.unwrap();
        }))
        .await;
        for &n in &keys {
            let state = match n % 10 {
                0 => RecordState::InFlight,
                1 => RecordState::OutcomeUnknown,
                _ => RecordState::Completed,
            };
            made.push((key_of(n), state));
        }
        tick();
    }
    for n in 0..3 {
        let lease = reserve(store, &id("other", &format!("o{n}"))).await;
        store
            .complete(&lease, &answer(201, false), LONG)
            .await
            .unwrap();
    }
    made
}

/// Every page of `state` (all when `None`), `limit` at a time.
async fn page_all(
    store: &Arc<dyn Store>,
    state: Option<RecordState>,
    limit: u32,
) -> Vec<idemgate::store::Listed> {
    let mut all = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store
            .list(&ListQuery {
                route: "orders".into(),
                state,
                limit,
                after: after.take(),
            })
            .await
            .unwrap();
        pages += 1;
        assert!(page.records.len() <= limit as usize);
        all.extend(page.records);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
        assert!(pages < 10_000, "paging does not end");
    }
    all
}

async fn pages_through_every_record_once_in_order(store: Arc<dyn Store>, tick: impl Fn()) {
    let made = fill(&store, tick).await;
    let listed = page_all(&store, None, 1000).await;
    assert_eq!(
        listed.len(),
        2500,
        "every record of the route, no other route's"
    );
    let keys: HashSet<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys.len(), 2500, "each exactly once");
    for pair in listed.windows(2) {
        let order = |r: &idemgate::store::Listed| (r.created_at, r.key.clone(), r.scope.clone());
        assert!(order(&pair[0]) < order(&pair[1]), "oldest first: {pair:?}");
    }
    for record in &listed {
        let state = made.iter().find(|(k, _)| *k == record.key).unwrap().1;
        assert_eq!(record.state, state, "{record:?}");
        assert_eq!(record.scope, "scope-a");
        match state {
            RecordState::InFlight => assert_eq!((record.status, record.completed_at), (None, None)),
            RecordState::OutcomeUnknown => assert_eq!(record.status, Some(504)),
            RecordState::Completed => assert!(record.expires_at.is_some()),
        }
    }

    // One state, in small pages: exactly that state's records, in order.
    let unknown = page_all(&store, Some(RecordState::OutcomeUnknown), 7).await;
    assert_eq!(unknown.len(), 250);
    assert!(
        unknown
            .iter()
            .all(|r| r.state == RecordState::OutcomeUnknown)
    );
    let in_flight = page_all(&store, Some(RecordState::InFlight), 1000).await;
    assert_eq!(in_flight.len(), 250);
    let completed = page_all(&store, Some(RecordState::Completed), 999).await;
    assert_eq!(completed.len(), 2000);

    let counts = store.count().await.unwrap();
    assert_eq!(counted(&counts, "orders", RecordState::InFlight), 250);
    assert_eq!(counted(&counts, "orders", RecordState::OutcomeUnknown), 250);
    assert_eq!(counted(&counts, "orders", RecordState::Completed), 2000);
    assert_eq!(counted(&counts, "other", RecordState::Completed), 3);

    // A route without records: an empty last page.
    let none = store
        .list(&ListQuery {
            route: "nothing".into(),
            state: None,
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!((none.records.len(), none.next), (0, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_pages_through_2500_records_once_each_in_order() {
    let clock = TestClock::new();
    let store = embedded(&clock);
    let ticking = clock.clone();
    pages_through_every_record_once_in_order(store, move || {
        ticking.advance(Duration::from_millis(3))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_pages_through_2500_records_once_each_in_order() {
    let (store, _schema) = postgres().await;
    pages_through_every_record_once_in_order(store, || {}).await;
}

/// A page of every state is read at one instant: a record completing while
/// the page is read is listed once, in flight or completed, never twice (a
/// page read state by state, each range in a statement of its own, listed
/// it in flight and then completed, on the same page), and a record that
/// stood the whole time is never left out.
async fn a_page_lists_a_record_completing_meanwhile_once(store: Arc<dyn Store>) {
    let ids: Vec<RecordId> = (0..300).map(|n| id("orders", &key_of(n))).collect();
    let leases = join_all(ids.iter().map(|id| reserve(&store, id))).await;
    let completing = {
        let store = store.clone();
        tokio::spawn(async move {
            for lease in &leases {
                store
                    .complete(lease, &answer(201, false), LONG)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let mut pages = 0;
    while !completing.is_finished() {
        let page = store
            .list(&ListQuery {
                route: "orders".into(),
                state: None,
                limit: 1000,
                after: None,
            })
            .await
            .unwrap();
        pages += 1;
        let keys: HashSet<&str> = page.records.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            (keys.len(), page.records.len()),
            (300, 300),
            "page {pages}: each record once, none left out"
        );
    }
    completing.await.unwrap();
    assert!(pages > 1, "no page was read while records completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_a_page_lists_a_record_completing_meanwhile_once() {
    a_page_lists_a_record_completing_meanwhile_once(embedded(&TestClock::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_page_lists_a_record_completing_meanwhile_once() {
    let (store, _schema) = postgres().await;
    a_page_lists_a_record_completing_meanwhile_once(store).await;
}

/// Counts follow creations, completions, expiry, sweeps and purges.
async fn counts_follow_the_records(store: Arc<dyn Store>, expire: impl AsyncFnOnce()) {
    let counts = || async { store.count().await.unwrap() };
    let of = |counts: &[Count], state| counted(counts, "orders", state);
    assert!(counts().await.is_empty());

    let a = reserve(&store, &id("orders", "a")).await;
    let b = reserve(&store, &id("orders", "b")).await;
    let c = reserve(&store, &id("orders", "c")).await;
    // `d`'s holder dies: its lease runs out with `a`'s retention.
    let d = id("orders", "d");
    let d = store.reserve(&d, "fp", Duration::from_millis(300)).await;
    assert!(matches!(d.unwrap(), Reservation::Reserved(_)));
    let now = counts().await;
    assert_eq!(of(&now, RecordState::InFlight), 4);

    store
        .complete(&a, &answer(201, false), Duration::from_millis(300))
        .await
        .unwrap();
    store.complete(&b, &answer(504, true), LONG).await.unwrap();
    let now = counts().await;
    assert_eq!(of(&now, RecordState::InFlight), 2);
    assert_eq!(of(&now, RecordState::Completed), 1);
    assert_eq!(of(&now, RecordState::OutcomeUnknown), 1);
    assert_eq!(
        store.records("orders", "b").await.unwrap()[0].state,
        RecordState::OutcomeUnknown,
        "shown as its own state"
    );

    // Past its retention, `a` is no longer counted, swept or not; past its
    // lease, `d` is no longer in flight (nor listed), and the sweep takes it.
    expire().await;
    let now = counts().await;
    assert_eq!(of(&now, RecordState::Completed), 0, "{now:?}");
    assert_eq!(of(&now, RecordState::InFlight), 1, "{now:?}");
    let flying = store
        .list(&ListQuery {
            route: "orders".into(),
            state: Some(RecordState::InFlight),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    let keys: Vec<&str> = flying.records.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["c"]);
    assert_eq!(
        flying.records[0].expires_at,
        Some(c.expires_at),
        "its lease"
    );
    assert_eq!(store.sweep(100).await.unwrap(), 2);
    assert_eq!(of(&counts().await, RecordState::Completed), 0);
    assert!(store.records("orders", "d").await.unwrap().is_empty());

    // A purge of the outcome-unknown key (once reconciled) removes it.
    assert_eq!(store.purge("orders", "b").await.unwrap(), 1);
    let now = counts().await;
    assert_eq!(of(&now, RecordState::OutcomeUnknown), 0);
    let unknown = store
        .list(&ListQuery {
            route: "orders".into(),
            state: Some(RecordState::OutcomeUnknown),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert!(unknown.records.is_empty());

    // A key taken over after its retention is in flight again, unmarked.
    store.release(&c).await.unwrap();
    assert_eq!(of(&counts().await, RecordState::InFlight), 0);
}

#[tokio::test]
async fn embedded_counts_follow_the_records() {
    let clock = TestClock::new();
    let store = embedded(&clock);
    counts_follow_the_records(store, async || clock.advance(Duration::from_secs(1))).await;
}

#[tokio::test]
async fn postgres_counts_follow_the_records() {
    let (store, _schema) = postgres().await;
    counts_follow_the_records(store, async || {
        tokio::time::sleep(Duration::from_millis(400)).await
    })
    .await;
}

#[tokio::test]
async fn embedded_replays_tell_the_age_by_the_stores_clock() {
    let clock = TestClock::new();
    let store = embedded(&clock);
    let key = id("orders", "k");
    let lease = reserve(&store, &key).await;
    store
        .complete(&lease, &answer(201, false), Duration::from_secs(86_400))
        .await
        .unwrap();
    assert_eq!(replay_kept(&store, &key).await.age, Some(Duration::ZERO));
    clock.advance(Duration::from_secs(7_000));
    let kept = replay_kept(&store, &key).await;
    assert_eq!(kept.age, Some(Duration::from_secs(7_000)));
    assert_eq!(
        kept.expires_at,
        UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + 86_400_000)
    );
}

#[tokio::test]
async fn postgres_replays_tell_the_age_by_the_databases_clock() {
    let (store, schema) = postgres().await;
    let key = id("orders", "k");
    let keys: Vec<RecordId> = (0..64).map(|n| id("orders", &format!("b{n}"))).collect();
    for key in keys.iter().chain([&key]) {
        let lease = reserve(&store, key).await;
        store
            .complete(&lease, &answer(201, false), Duration::from_secs(86_400))
            .await
            .unwrap();
    }
    assert!(replay_kept(&store, &key).await.age.unwrap() < Duration::from_secs(2));
    // Completed two hours ago, as far as the database knows.
    pg_support::admin_sql(&format!(
        "UPDATE {schema}.idemgate_records SET completed_at = completed_at - interval '2 hours'"
    ))
    .await;
    let age = replay_kept(&store, &key).await.age.unwrap();
    assert!(
        (Duration::from_secs(7_200)..Duration::from_secs(7_202)).contains(&age),
        "{age:?}"
    );
    // Replays arriving together are decided in batches (one statement for
    // many keys): the age comes with them too.
    let ages = join_all(keys.iter().map(|key| replay_kept(&store, key))).await;
    for kept in ages {
        let age = kept.age.unwrap();
        assert!(
            (Duration::from_secs(7_200)..Duration::from_secs(7_205)).contains(&age),
            "{age:?}"
        );
    }
}

/// Through the in-process copies the gateway keeps, the age goes on growing
/// from the store's answer.
#[tokio::test]
async fn copies_in_memory_keep_the_completion_time() {
    let clock = TestClock::new();
    let store = embedded(&clock);
    let key = id("orders", "k");
    let lease = reserve(&store, &key).await;
    store
        .complete(&lease, &answer(201, false), LONG)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(60));
    let shared = OwnedStore {
        store: store.clone(),
        guard: (),
    };
    let cache: Arc<dyn Store> = Arc::new(idemgate::store::ReplayCache::new(shared, 1 << 20));
    let first = replay_kept(&cache, &key).await.age.unwrap();
    assert_eq!(first, Duration::from_secs(60), "from the store");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The copy's answer: the store's clock did not move, the copy's did.
    let copied = replay_kept(&cache, &key).await.age.unwrap();
    assert!(
        copied >= Duration::from_millis(60_250) && copied < Duration::from_secs(62),
        "{copied:?}"
    );
}

/// A file of the version before the outcome-unknown mark: the column is
/// added and the gateway's own outcome-unknown answers already stored are
/// marked; an upstream's own 502 is not.
#[tokio::test]
async fn an_embedded_file_of_version_2_is_migrated_and_its_unknown_outcomes_marked() {
    let clock = TestClock::new();
    let path = temp_db("v2");
    let _dir = TempDir(path.clone());
    {
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_with_clock(&path, clock.clock()).unwrap());
        let problem = idemgate::error::GatewayError::OutcomeUnknownTimeout;
        let gateways = StoredResponse {
            status: 504,
            headers: StoredResponse::header_list([(
                "content-type",
                b"application/problem+json".as_slice(),
            )]),
            body: Bytes::from(problem.body()),
            body_omitted: false,
            // Written by a version that did not mark it.
            outcome_unknown: false,
        };
        let lease = reserve(&store, &id("orders", "unknown")).await;
        store.complete(&lease, &gateways, LONG).await.unwrap();
        let upstreams = StoredResponse {
            status: 502,
            body: Bytes::from_static(b"{\"type\":\"bad-gateway\"}"),
            ..gateways.clone()
        };
        let lease = reserve(&store, &id("orders", "upstream")).await;
        store.complete(&lease, &upstreams, LONG).await.unwrap();
    }
    // Back to version 2's shape.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX records_listing;
         ALTER TABLE records DROP COLUMN outcome_unknown;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);

    assert_eq!(EmbeddedStore::migrate(&path).unwrap().found, 2);
    let store: Arc<dyn Store> =
        Arc::new(EmbeddedStore::open_with_clock(&path, clock.clock()).unwrap());
    let state = |key: &'static str| {
        let store = store.clone();
        async move { store.records("orders", key).await.unwrap()[0].state }
    };
    assert_eq!(state("unknown").await, RecordState::OutcomeUnknown);
    assert_eq!(state("upstream").await, RecordState::Completed);
    match store
        .reserve(&id("orders", "unknown"), "fp", LONG)
        .await
        .unwrap()
    {
        Reservation::Completed(answer) => assert!(answer.outcome_unknown),
        other => panic!("{other:?}"),
    }
}

/// Redis in front of Postgres: an answer Postgres replays is written back
/// with its completion time, and a hit in Redis tells the same age.
#[tokio::test]
async fn redis_hits_tell_the_age_postgres_gave() {
    let schema = TestSchema::create().await;
    let name = schema.name.clone();
    let prefix = pg_support::RedisPrefix::new("retention");
    let authority = PostgresStore::connect(&schema.config()).await.unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let counted_hits = hits.clone();
    let cached = idemgate::store::CachedStore::new(
        authority,
        &pg_support::redis_config(&prefix.0),
        idemgate::store::CacheHooks::lookups(Arc::new(move |lookup| {
            if lookup == idemgate::store::Lookup::Hit {
                counted_hits.fetch_add(1, Ordering::SeqCst);
            }
        })),
    )
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(OwnedStore {
        store: Arc::new(cached),
        guard: SchemaGuard {
            schema,
            redis_prefix: Some(prefix.0.clone()),
        },
    });
    let key = id("orders", "k");
    let lease = reserve(&store, &key).await;
    store
        .complete(&lease, &answer(201, false), Duration::from_secs(86_400))
        .await
        .unwrap();
    let fresh = replay_kept(&store, &key).await.age.unwrap();
    assert!(fresh < Duration::from_secs(2), "{fresh:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "written by the completion");

    // Completed two hours ago by the database's account; Redis loses its copy.
    pg_support::admin_sql(&format!(
        "UPDATE {name}.idemgate_records SET completed_at = completed_at - interval '2 hours'"
    ))
    .await;
    pg_support::redis_flush_prefix(&prefix.0).await;
    let two_hours = Duration::from_secs(7_200)..Duration::from_secs(7_203);
    let from_postgres = replay_kept(&store, &key).await.age.unwrap();
    assert!(two_hours.contains(&from_postgres), "{from_postgres:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "a miss");
    let from_redis = replay_kept(&store, &key).await.age.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 2, "written back, then hit");
    assert!(two_hours.contains(&from_redis), "{from_redis:?}");
    drop(prefix);
}

/// Runs `sql` on a fresh connection to the test database; returns the
/// first column of its one row.
async fn pg_number(sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let n = client.query_one(sql, &[]).await.unwrap().get(0);
    drop(client);
    let _ = task.await;
    n
}

/// What both backends' estimates of `orders` (past an exact limit of 1,000)
/// promise beyond their accuracy: the same sample at every count, so the
/// gauge moves only when the records do; and a sample that finds nothing of
/// a route past the limit still reports more than the limit.
async fn estimate_is_steady_and_above_the_limit(
    count_within: impl AsyncFn(CountLimits) -> Vec<Count>,
    limits: CountLimits,
    estimate: u64,
) {
    let again = count_within(limits).await;
    assert_eq!(counted(&again, "orders", RecordState::Completed), estimate);
    let tiny = CountLimits {
        exact_completed: 1000,
        sample_pages: 1,
    };
    for _ in 0..3 {
        let counts = count_within(tiny).await;
        assert!(counted(&counts, "orders", RecordState::Completed) > 1000);
    }
}

/// Past a route's exact limit, its completed records are estimated from a
/// sample of the table's pages (the count then costs the same on a table of
/// any size); in-flight and outcome-unknown records, and routes under the
/// limit, stay exact. The default limits count this table exactly.
#[tokio::test]
async fn postgres_estimates_completed_records_past_the_exact_limit() {
    let schema = TestSchema::create().await;
    let name = schema.name.clone();
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    // 50,000 records of `orders` written oldest first, as a gateway writes
    // them: 1% in flight, 1% outcome unknown, 1% completed but expired (the
    // oldest, together at the start of the table), the rest completed; and
    // 50 completed records of `refunds`.
    pg_support::admin_sql(&format!(
        "INSERT INTO {name}.idemgate_records
             (route, scope, key, state, fingerprint, token, status, header_names, header_values,
              body, created_at, completed_at, expires_at, lease_expires_at, outcome_unknown)
         SELECT 'orders', 'scope-a', 'k' || n, CASE WHEN n % 100 = 0 THEN 0 ELSE 1 END,
                md5(n::text), n, CASE WHEN n % 100 = 0 THEN NULL WHEN n % 100 = 1 THEN 504 ELSE 201 END,
                '{{content-type}}', ARRAY['application/json'::bytea],
                convert_to('{{\"id\":\"ch_' || n || '\",\"amount\":1000}}', 'UTF8'),
                now(), now(),
                CASE WHEN n % 100 = 0 THEN NULL
                     WHEN n <= 1000 AND n % 100 <> 1 THEN now() - interval '1 minute'
                     ELSE now() + interval '1 hour' END,
                CASE WHEN n % 100 = 0 THEN now() + interval '1 hour' END,
                n % 100 = 1
         FROM generate_series(1, 50000) AS n;
         INSERT INTO {name}.idemgate_records
             (route, scope, key, state, fingerprint, token, status, created_at, completed_at,
              expires_at)
         SELECT 'refunds', 'scope-a', 'r' || n, 1, md5(n::text), 50000 + n, 201, now(), now(),
                now() + interval '1 hour'
         FROM generate_series(1, 50) AS n;"
    ))
    .await;
    // Of `orders`: 500 in flight, 500 of unknown outcome, 980 expired.
    let completed = 50_000 - 500 - 500 - 980;
    let exact = store.count().await.unwrap();
    assert_eq!(counted(&exact, "orders", RecordState::Completed), completed);
    assert_eq!(counted(&exact, "orders", RecordState::InFlight), 500);
    assert_eq!(counted(&exact, "orders", RecordState::OutcomeUnknown), 500);
    assert_eq!(counted(&exact, "refunds", RecordState::Completed), 50);

    // Half the table's pages sampled (the same half at every count): one
    // standard error of such an estimate is ~4% here; ±20% is far out.
    let pages = pg_number(&format!(
        "SELECT pg_relation_size('{name}.idemgate_records') / current_setting('block_size')::bigint"
    ))
    .await;
    assert!(pages > 200, "a table of {pages} pages");
    let sample_pages = u32::try_from(pages / 2).unwrap();
    let limits = CountLimits {
        exact_completed: 1000,
        sample_pages,
    };
    let counts = store.count_within(limits).await.unwrap();
    let estimate = counted(&counts, "orders", RecordState::Completed);
    let error = estimate.abs_diff(completed) as f64 / completed as f64;
    assert!(error < 0.2, "estimated {estimate} of {completed}");
    assert_eq!(counted(&counts, "orders", RecordState::InFlight), 500);
    assert_eq!(counted(&counts, "orders", RecordState::OutcomeUnknown), 500);
    assert_eq!(
        counted(&counts, "refunds", RecordState::Completed),
        50,
        "under the limit: exact"
    );
    // It is the count's sample (same pages, same seed), scaled up: not an
    // exact count that happens to fall within the tolerance.
    let percent = (100.0 * f64::from(sample_pages) / pages as f64) as f32;
    let sampled = pg_number(&format!(
        "SELECT count(*) FROM {name}.idemgate_records TABLESAMPLE SYSTEM ({percent}) REPEATABLE (0)
         WHERE route = 'orders' AND state = 1 AND NOT outcome_unknown AND expires_at > now()"
    ))
    .await;
    assert_eq!(
        estimate,
        (sampled as f64 * 100.0 / f64::from(percent)).round() as u64
    );
    estimate_is_steady_and_above_the_limit(
        async |limits| store.count_within(limits).await.unwrap(),
        limits,
        estimate,
    )
    .await;
    drop(store);
}

/// The embedded store counts on a connection of its own, beside the
/// writer: a file's worth of records takes a while to count, and writes
/// issued meanwhile are answered without waiting for the count. (On the
/// writer thread, every write issued after the count started waited for
/// its end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_writes_go_on_while_the_count_runs() {
    const RECORDS: i64 = 300_000;
    let path = temp_db("count-beside");
    let _dir = TempDir(path.clone());
    drop(EmbeddedStore::open(&path).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                              created_at, completed_at, expires_at)
         SELECT 'bulk', 'scope-a', printf('k%08d', i), 1, 'fp', i, 201, x'7b7d', ?2, ?2, ?3
         FROM n",
        rusqlite::params![RECORDS, now, now + 86_400_000],
    )
    .unwrap();
    drop(conn);

    let embedded = Arc::new(EmbeddedStore::open(&path).unwrap());
    let store: Arc<dyn Store> = embedded.clone();
    let counting = tokio::spawn({
        let store = embedded.clone();
        async move {
            let started = std::time::Instant::now();
            // Every record counted one by one: the longest count the file
            // can take (the default limits stop at 100,000 and sample).
            let everything = CountLimits {
                exact_completed: u32::MAX,
                sample_pages: 1,
            };
            let counts = store.count_within(everything).await.unwrap();
            (counts, started.elapsed(), std::time::Instant::now())
        }
    });
    // Under way (on the writer thread, it would be holding the writer now).
    tokio::time::sleep(Duration::from_millis(20)).await;
    // When each write was answered, judged against the count's own end
    // (not against whether the task was seen finished, which a busy
    // machine reports late).
    let mut answered = Vec::new();
    while !counting.is_finished() {
        let started = std::time::Instant::now();
        let lease = reserve(&store, &id("orders", &format!("w{}", answered.len()))).await;
        store
            .complete(&lease, &answer(201, false), LONG)
            .await
            .unwrap();
        answered.push((std::time::Instant::now(), started.elapsed()));
    }
    let (counts, took, count_ended) = counting.await.unwrap();
    let meanwhile: Vec<Duration> = answered
        .iter()
        .filter(|(at, _)| *at < count_ended)
        .map(|(_, took)| *took)
        .collect();
    let (during, slowest) = (meanwhile.len(), meanwhile.iter().max().copied());
    eprintln!(
        "count of {RECORDS} records: {took:?}; {during} writes answered meanwhile, slowest {slowest:?}"
    );
    assert_eq!(
        counted(&counts, "bulk", RecordState::Completed),
        RECORDS as u64
    );
    assert!(
        during >= 1,
        "no write was answered while the count ran ({took:?})"
    );
}

/// The embedded store's count, as Postgres's: past a route's exact limit its
/// completed records are estimated from records at fixed rowids over the
/// table (the same at every count); in-flight and outcome-unknown records,
/// and routes under the limit, stay exact.
#[tokio::test]
async fn embedded_estimates_completed_records_past_the_exact_limit() {
    let path = temp_db("estimate");
    let _dir = TempDir(path.clone());
    let clock = TestClock::new();
    drop(EmbeddedStore::open(&path).unwrap());
    let now = 1_800_000_000_000_i64;
    // 50,000 records of `orders` written oldest first, the routes taking
    // turns with `refunds` every tenth record (a regular pattern a sample at
    // a fixed offset would alias with): of `orders`, 1% in flight, 1% of
    // unknown outcome, the oldest 1,000 completed but expired; 50 completed
    // records of `refunds` at the end.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 55000)
         INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                              created_at, completed_at, expires_at, lease_expires_at,
                              outcome_unknown)
         SELECT CASE WHEN i % 10 = 0 THEN 'refunds' ELSE 'orders' END, 'scope-a', 'k' || i,
                CASE WHEN i % 100 = 1 THEN 0 ELSE 1 END, 'fp', i,
                CASE WHEN i % 100 = 1 THEN NULL WHEN i % 100 = 2 THEN 504 ELSE 201 END, x'7b7d',
                {now} - 55000 + i, {now} - 55000 + i,
                CASE WHEN i % 100 = 1 THEN NULL
                     WHEN i <= 1100 AND i % 100 <> 2 THEN {now} - 1
                     ELSE {now} + 3600000 END,
                CASE WHEN i % 100 = 1 THEN {now} + 3600000 END,
                i % 100 = 2
         FROM n;
         DELETE FROM records WHERE route = 'refunds' AND token <= 54500;"
    ))
    .unwrap();
    let of = |route: &str, sql: &str| -> u64 {
        conn.query_row(
            &format!("SELECT count(*) FROM records WHERE route = '{route}' AND {sql}"),
            [],
            |row| row.get::<_, i64>(0),
        )
        .unwrap() as u64
    };
    let completed = of(
        "orders",
        &format!("state = 1 AND outcome_unknown = 0 AND expires_at > {now}"),
    );
    let in_flight = of("orders", "state = 0");
    let unknown = of("orders", "outcome_unknown = 1");
    assert_eq!(of("refunds", "1"), 50);
    assert!(completed > 45_000 && in_flight == 550 && unknown == 550);
    drop(conn);

    let store = EmbeddedStore::open_with_clock(&path, clock.clock()).unwrap();
    let exact = store.count_within(CountLimits::default()).await.unwrap();
    assert_eq!(counted(&exact, "orders", RecordState::Completed), completed);
    assert_eq!(counted(&exact, "orders", RecordState::InFlight), in_flight);
    assert_eq!(
        counted(&exact, "orders", RecordState::OutcomeUnknown),
        unknown
    );
    assert_eq!(counted(&exact, "refunds", RecordState::Completed), 50);

    // ~1,000-2,000 positions of 55,000 rowids: one standard error of the
    // estimate is ~3% here; +-15% is far out.
    let limits = CountLimits {
        exact_completed: 1000,
        sample_pages: 1000,
    };
    let counts = store.count_within(limits).await.unwrap();
    let estimate = counted(&counts, "orders", RecordState::Completed);
    let error = estimate.abs_diff(completed) as f64 / completed as f64;
    assert!(error < 0.15, "estimated {estimate} of {completed}");
    assert_ne!(estimate, completed, "an estimate, not the count");
    assert_eq!(counted(&counts, "orders", RecordState::InFlight), in_flight);
    assert_eq!(
        counted(&counts, "orders", RecordState::OutcomeUnknown),
        unknown
    );
    assert_eq!(
        counted(&counts, "refunds", RecordState::Completed),
        50,
        "under the limit: exact"
    );
    estimate_is_steady_and_above_the_limit(
        async |limits| store.count_within(limits).await.unwrap(),
        limits,
        estimate,
    )
    .await;
}

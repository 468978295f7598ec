//! The conformance suite against `PostgresStore` (one schema per test), plus
//! what only the Postgres backend has: migrations, many sweepers, secrets.

mod common;
mod pg_support;
mod store_conformance;

use std::sync::Arc;
use std::time::Duration;

use common::owned_store::OwnedStore;
use idemgate::store::{PostgresStore, ReplayCache, Reservation, Store, StoreError};
use pg_support::{SchemaGuard, TestRole, TestSchema};
use store_conformance::{id, reserved, response};

const LONG: Duration = Duration::from_secs(60);

async fn fresh() -> Arc<dyn Store> {
    let schema = TestSchema::create().await;
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    Arc::new(OwnedStore {
        store: Arc::new(store),
        guard: SchemaGuard {
            schema,
            redis_prefix: None,
        },
    })
}

store_conformance::conformance_tests!(fresh().await);

/// With the in-memory copies in front, as `serve` opens it: concurrent
/// replays of one large answer share one query's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_replays_of_a_large_answer_share_one_read() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    let store = Arc::new(OwnedStore {
        store: Arc::new(ReplayCache::new(store, 1 << 20)),
        guard: SchemaGuard {
            schema,
            redis_prefix: None,
        },
    });
    store_conformance::concurrent_replays_of_a_large_answer_share_one_read(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_replicas_migrating_at_once_apply_each_version_once() {
    let schema = TestSchema::create().await;
    let config = schema.config();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let config = config.clone();
            tokio::spawn(async move { PostgresStore::lazy(&config).unwrap().migrate().await })
        })
        .collect();
    let mut applied = Vec::new();
    for task in tasks {
        applied.extend(task.await.unwrap().unwrap().applied);
    }
    assert_eq!(applied, vec![1, 2], "each version applied exactly once");
    // And the schema works.
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    reserved(&store, &id("k"), "fp", Duration::from_secs(60)).await;
}

/// Upgrading a schema whose table is large: the migration's index takes
/// longer than `statement_timeout` (which bounds requests, not migrations),
/// and the replicas started beside it wait for it on the lock. (Every one of
/// them used to fail, the migrating one included: "canceling statement due
/// to statement timeout".)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_longer_than_the_statement_timeout_completes() {
    let schema = TestSchema::create().await;
    pg_support::admin_sql(&format!(
        "SET search_path = {name};
         {v1}
         CREATE TABLE idemgate_schema_migrations (
             version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO idemgate_schema_migrations (version) VALUES (1);
         INSERT INTO idemgate_records (route, scope, key, state, fingerprint, token, status,
             body_omitted, created_at, completed_at, expires_at)
         SELECT 'r', 's', 'k' || g, 1, 'fp', g, 201, false, now(), now(), now() + interval '1 day'
         FROM generate_series(1, 200000) g;",
        name = schema.name,
        v1 = include_str!("../src/store/postgres/migrations/0001_records.sql"),
    ))
    .await;
    let mut config = schema.config();
    config.statement_timeout = Duration::from_millis(20);
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let config = config.clone();
            tokio::spawn(async move { PostgresStore::lazy(&config).unwrap().migrate().await })
        })
        .collect();
    let mut applied = Vec::new();
    for task in tasks {
        applied.extend(task.await.unwrap().unwrap().applied);
    }
    assert_eq!(applied, vec![2]);
}

/// A `lock_timeout` a DBA set on the role bounds every lock wait of its
/// sessions, the wait of a replica for another's migration too: replicas
/// starting together on an upgrade wait for the one that migrates, however
/// short the role's `lock_timeout`, instead of failing to start with
/// "canceling statement due to lock timeout".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_waits_for_another_whatever_the_roles_lock_timeout() {
    let schema = TestSchema::create().await;
    let role = TestRole::create().await;
    pg_support::admin_sql(&format!(
        "ALTER ROLE {} SET lock_timeout = '20ms'",
        role.name
    ))
    .await;
    let mut config = schema.config();
    config.url = role.url(&config.url);
    // Another replica's migration, holding the lock for 500 ms.
    let (holder, connection) =
        tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({}, hashtext('{}'))",
            0x6964_656d, schema.name
        ))
        .await
        .unwrap();
    let migrating =
        tokio::spawn(async move { PostgresStore::lazy(&config).unwrap().migrate().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.batch_execute("COMMIT").await.unwrap();
    let report = migrating.await.unwrap().unwrap();
    assert!(!report.applied.is_empty());
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let schema = TestSchema::create().await;
    PostgresStore::connect(&schema.config()).await.unwrap();
    pg_support::admin_sql(&format!(
        "INSERT INTO {}.idemgate_schema_migrations (version) VALUES (99)",
        schema.name
    ))
    .await;
    for migrate in [true, false] {
        let mut config = schema.config();
        config.migrate = migrate;
        let err = PostgresStore::connect(&config)
            .await
            .err()
            .expect("refused");
        let msg = err.to_string();
        assert!(msg.contains("newer") && msg.contains("99"), "{msg}");
    }
}

#[tokio::test]
async fn migrate_false_on_an_empty_schema_says_to_run_migrate() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.migrate = false;
    let msg = PostgresStore::connect(&config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(msg.contains("idemgate migrate"), "{msg}");
    // After migrating, the same config opens.
    PostgresStore::lazy(&config)
        .unwrap()
        .migrate()
        .await
        .unwrap();
    PostgresStore::connect(&config).await.unwrap();
}

/// A search_path naming a schema that does not exist is said so, with the
/// path, by `migrate` and by a start with `store.migrate = false` (they said
/// "no schema has been selected to create in", and "run idemgate migrate").
#[tokio::test]
async fn a_schema_that_does_not_exist_is_named() {
    let missing = pg_support::unique("idemgate_missing");
    let mut config = TestSchema::create().await.config();
    config.url = pg_support::url_in_schema(&missing);
    for migrate in [true, false] {
        config.migrate = migrate;
        let msg = PostgresStore::connect(&config)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(
            msg.contains("no schema of the search_path") && msg.contains(&missing),
            "{msg}"
        );
    }
}

/// A role that may use the schema but not create in it (the default for
/// `public` since PostgreSQL 15) is told what it lacks and the two ways
/// out, naming the schema: PostgreSQL's own "permission denied for schema"
/// says neither that CREATE is what is missing nor that `serve` need not
/// migrate.
#[tokio::test]
async fn a_role_that_may_not_create_in_the_schema_is_told_what_to_grant() {
    let schema = TestSchema::create().await;
    let role =
        TestRole::limited(|role| format!("GRANT USAGE ON SCHEMA {} TO {role}", schema.name)).await;
    let mut config = schema.config();
    config.url = role.url(&config.url);
    let refused = PostgresStore::connect(&config).await.err();
    let msg = refused.expect("refused").to_string();
    assert!(
        msg.contains(&format!("GRANT CREATE ON SCHEMA {}", schema.name))
            && msg.contains("store.migrate = false"),
        "{msg}"
    );
}

/// Readiness needs the records table, not only a database that answers:
/// a schema dropped (or restored without the tables) under a running gateway
/// fails every keyed request, and `ping` said ready all the same.
#[tokio::test]
async fn ping_fails_while_the_tables_are_gone() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    store.ping().await.unwrap();
    pg_support::admin_sql(&format!(
        "DROP SCHEMA {0} CASCADE; CREATE SCHEMA {0}",
        schema.name
    ))
    .await;
    assert!(store.ping().await.is_err(), "ready without the tables");
    store.migrate().await.unwrap();
    store.ping().await.unwrap();
}

/// `/readyz`'s probe asks the database once: whether the session takes
/// writes, whether the records table is there, and which grant the role
/// lacks are one statement, one round trip (counted on the wire).
#[tokio::test]
async fn a_readiness_probe_is_one_statement_in_one_round_trip() {
    let schema = TestSchema::create().await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&schema.url(), switch.addr);
    let store = PostgresStore::connect(&config).await.unwrap();
    // The first probe on a connection also prepares its statement.
    store.ping().await.unwrap();
    let (syncs, executes, simple) = (switch.sent(b'S'), switch.sent(b'E'), switch.sent(b'Q'));
    let probes = 20;
    for _ in 0..probes {
        store.ping().await.unwrap();
    }
    assert_eq!(switch.sent(b'S') - syncs, probes, "round trips");
    assert_eq!(switch.sent(b'E') - executes, probes, "statements");
    assert_eq!(switch.sent(b'Q') - simple, 0, "simple queries");
}

#[tokio::test]
async fn errors_never_carry_the_password() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    // Nothing listens on port 1.
    config.url = "postgres://postgres:hunter2-secret@127.0.0.1:1/test".into();
    config.connect_timeout = Duration::from_millis(500);
    let err = PostgresStore::connect(&config)
        .await
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)));
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(!msg.contains("postgres://"), "{msg}");
    // Where it dialed, without the credentials.
    assert!(msg.contains("postgres at 127.0.0.1:1: "), "{msg}");
    assert!(msg.contains("Connection refused"), "{msg}");

    // A Unix socket is named by its file.
    config.url = "postgres://postgres:hunter2-secret@/test?host=/nonexistent/pg&port=6543".into();
    let msg = PostgresStore::connect(&config)
        .await
        .err()
        .expect("no socket")
        .to_string();
    assert!(!msg.contains("hunter2"), "{msg}");
    assert!(
        msg.contains("postgres at /nonexistent/pg/.s.PGSQL.6543: "),
        "{msg}"
    );

    config.url = "postgres://postgres:hunter2-secret@127.0.0.1:5432/test?bogus=1".into();
    let msg = PostgresStore::connect(&config)
        .await
        .err()
        .expect("bad url")
        .to_string();
    assert!(!msg.contains("hunter2"), "{msg}");
}

#[tokio::test]
async fn unreachable_at_runtime_is_unavailable_then_recovers() {
    let schema = TestSchema::create().await;
    let store = PostgresStore::connect(&schema.config()).await.unwrap();
    store.ping().await.unwrap();
    // Cut every session of this store.
    assert!(pg_support::terminate_sessions(&schema.name).await >= 1);
    // A later call may meet a connection still dying: an error, never a
    // panic or a hang.
    if let Err(err) = store.ping().await {
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }
    // The pool notices the dead connections and opens new ones: no restart.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if store.ping().await.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "did not recover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store: Arc<dyn Store> = Arc::new(store);
    reserved(&store, &id("after"), "fp", Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sweepers_split_the_backlog() {
    let store = fresh().await;
    let keys = 300;
    for i in 0..keys {
        let lease = reserved(&store, &id(&format!("k{i}")), "fp", Duration::from_secs(60)).await;
        store
            .complete(&lease, &response(), Duration::from_millis(1))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let sweepers: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut total = 0;
                loop {
                    let n = store.sweep(25).await.unwrap();
                    total += n;
                    if n < 25 {
                        return total;
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for s in sweepers {
        total += s.await.unwrap();
    }
    assert_eq!(total, keys);
    assert_eq!(store.sweep(25).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_keys_many_tasks_one_reservation_each() {
    let store = fresh().await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .reserve(&id(&format!("k{}", i % 20)), "fp", Duration::from_secs(60))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        if let Reservation::Reserved(_) = t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 20);
}

#[tokio::test]
async fn a_completion_survives_its_session_being_cut() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.pool_size = 1;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", Duration::from_secs(60)).await;
    assert_eq!(pg_support::terminate_sessions(&schema.name).await, 1);
    store
        .complete(&lease, &response(), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        store
            .reserve(&id("k"), "fp", Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::Completed(response())
    );
}

/// A reservation or a release whose pooled connection was cut (a session
/// terminated, the database restarted) runs again on another: it failed (the
/// first statement on a connection the pool had not yet seen die), answering
/// 503, or passing the request without a record; a failed release left the
/// key in flight, refusing its retries until the lease ran out. (The race
/// with the pool noticing the death is lost often enough over a few rounds.)
#[tokio::test]
async fn reservations_and_releases_survive_their_session_being_cut() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.pool_size = 1;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease_for = Duration::from_secs(60);
    for round in 0..8 {
        let lease = reserved(&store, &id(&format!("r{round}")), "fp", lease_for).await;
        assert_eq!(pg_support::terminate_sessions(&schema.name).await, 1);
        store.release(&lease).await.expect("released");
        reserved(&store, &id(&format!("r{round}")), "fp", lease_for).await;
        assert_eq!(pg_support::terminate_sessions(&schema.name).await, 1);
        store
            .reserve(&id(&format!("n{round}")), "fp", lease_for)
            .await
            .expect("reserved");
    }
}

/// The readiness check (`/readyz`) whose pooled connection was cut runs again
/// on another, as a reservation does: it answered not ready while the
/// database was there (the first statement on a connection the pool had not
/// yet seen die), taking a replica out of service for nothing.
#[tokio::test]
async fn a_ping_survives_its_session_being_cut() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.pool_size = 1;
    let store = PostgresStore::connect(&config).await.unwrap();
    for round in 0..16 {
        store.ping().await.expect("ready");
        assert_eq!(pg_support::terminate_sessions(&schema.name).await, 1);
        if let Err(err) = store.ping().await {
            panic!("round {round}: not ready after a session was cut: {err}");
        }
    }
}

/// An operator's reads (`keys show`, the admin listing) right after every
/// session of the gateway was terminated (`pg_terminate_backend`, as a DBA
/// or a failover tool does): the pool may lend a connection whose end has
/// not reached it yet, and such a read runs again on another, as a
/// reservation does, instead of failing with "terminating connection due to
/// administrator command".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_survive_their_sessions_being_terminated() {
    let schema = TestSchema::create().await;
    let store = Arc::new(PostgresStore::connect(&schema.config()).await.unwrap());
    let listing = idemgate::store::ListQuery {
        route: "r".into(),
        state: None,
        limit: 10,
        after: None,
    };
    for round in 0..10 {
        // Several connections in the pool, idle when they are terminated.
        let warm: Vec<_> = (0..6)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.records("r", "k").await })
            })
            .collect();
        for read in warm {
            read.await.unwrap().unwrap();
        }
        pg_support::terminate_sessions(&schema.name).await;
        let reads: Vec<_> = (0..4)
            .map(|n| {
                let (store, listing) = (store.clone(), listing.clone());
                tokio::spawn(async move {
                    if n % 2 == 0 {
                        store.records("r", "k").await.map(drop)
                    } else {
                        store.list(&listing).await.map(drop)
                    }
                })
            })
            .collect();
        for read in reads {
            if let Err(err) = read.await.unwrap() {
                panic!("round {round}: a read failed after its session was terminated: {err}");
            }
        }
    }
}

/// A completion that could not reach
/// the database failed at once, the gateway acknowledged the upstream's answer
/// anyway, and once the lease ran out a retry took the key over and ran the
/// request a second time. A completion now retries while its lease holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_waits_out_a_short_outage_within_its_lease() {
    let schema = TestSchema::create().await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&schema.url(), switch.addr);
    config.connect_timeout = Duration::from_millis(500);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", Duration::from_secs(10)).await;
    switch.cut();
    let completing = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move {
            store
                .complete(&lease, &response(), Duration::from_secs(60))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!completing.is_finished(), "gave up during the outage");
    switch.restore();
    completing
        .await
        .unwrap()
        .expect("recorded once the database is back");
    assert_eq!(
        store
            .reserve(&id("k"), "fp", Duration::from_secs(10))
            .await
            .unwrap(),
        Reservation::Completed(response())
    );
}

/// ... but not beyond it: after the lease, the key belongs to whoever takes it
/// over, and the completion reports the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_gives_up_when_its_lease_runs_out() {
    let schema = TestSchema::create().await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&schema.url(), switch.addr);
    config.connect_timeout = Duration::from_millis(500);
    config.statement_timeout = Duration::from_millis(500);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", Duration::from_millis(1500)).await;
    switch.cut();
    let started = std::time::Instant::now();
    let err = store
        .complete(&lease, &response(), Duration::from_secs(60))
        .await
        .expect_err("the database stayed unreachable");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "{took:?}"
    );
}

/// ... and it tries once more at the lease's end. Found by running replicas
/// with one's database cut: the completion gave up while its lease still
/// had a pause (up to 500 ms) left, the database came back within it, and
/// once the lease ran out a retry on another replica ran the acknowledged
/// request a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_tries_once_more_at_the_end_of_its_lease() {
    let schema = TestSchema::create().await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&schema.url(), switch.addr);
    config.connect_timeout = Duration::from_millis(500);
    config.statement_timeout = Duration::from_millis(500);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", Duration::from_millis(2100)).await;
    let reserved_at = tokio::time::Instant::now();
    switch.cut();
    let completing = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move {
            store
                .complete(&lease, &response(), Duration::from_secs(60))
                .await
        })
    };
    // Tries fail at once (refused) and pause 50 ms doubling to 500 ms:
    // the last whole pause ends ~1,750 ms in, with ~350 ms of lease left.
    tokio::time::sleep_until(reserved_at + Duration::from_millis(1900)).await;
    switch.restore();
    completing
        .await
        .unwrap()
        .expect("recorded: the database was back before the lease ran out");
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
}

/// A replica's clock ahead of the database's does not shorten the time its
/// completion is retried: the lease is timed by the gateway's own clock from
/// when the reservation was sent. Found by running a replica 2 s ahead: the
/// database's lease end, read as if by the replica's clock, let its
/// completions give up 2 s early in a 1.5 s outage, and acknowledged
/// requests ran again after their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_waits_out_its_lease_with_the_database_clock_behind() {
    let schema = TestSchema::create().await;
    // The database's clock 2 s behind this process's: its `now()` shadowed
    // in the test's schema, which is searched before pg_catalog.
    pg_support::admin_sql(&format!(
        "CREATE FUNCTION {}.now() RETURNS timestamptz LANGUAGE sql STABLE \
         AS $$ SELECT pg_catalog.now() - interval '2 seconds' $$",
        schema.name
    ))
    .await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    let behind = schema.url().replacen(
        &format!("search_path%3D{}", schema.name),
        &format!("search_path%3D{}%2Cpg_catalog", schema.name),
        1,
    );
    config.url = pg_support::via(&behind, switch.addr);
    config.connect_timeout = Duration::from_millis(500);
    config.statement_timeout = Duration::from_millis(500);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", Duration::from_secs(3)).await;
    let reserved_at = tokio::time::Instant::now();
    switch.cut();
    let completing = {
        let (store, lease) = (store.clone(), lease.clone());
        tokio::spawn(async move {
            store
                .complete(&lease, &response(), Duration::from_secs(60))
                .await
        })
    };
    tokio::time::sleep_until(reserved_at + Duration::from_millis(1800)).await;
    assert!(!completing.is_finished(), "gave up within the lease");
    switch.restore();
    completing
        .await
        .unwrap()
        .expect("recorded: the database was back within the lease");
    assert_eq!(
        store.reserve(&id("k"), "fp", LONG).await.unwrap(),
        Reservation::Completed(response())
    );
}

/// A table locked by someone else (a migration, an operator's `LOCK
/// TABLE`) fails a reservation after one `statement_timeout`, not two: the
/// shared statement the database cancelled is not run again alone. The
/// completion of a request already forwarded waits the lock out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_table_fails_a_reservation_after_one_statement_timeout() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.statement_timeout = Duration::from_secs(1);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let lease = reserved(&store, &id("forwarded"), "fp", Duration::from_secs(10)).await;

    let (locker, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let session = tokio::spawn(conn);
    locker
        .batch_execute("BEGIN; LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let completing = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .complete(&lease, &response(), Duration::from_secs(60))
                .await
        }
    });
    let started = std::time::Instant::now();
    let refused = store
        .reserve(&id("new"), "fp", Duration::from_secs(10))
        .await;
    let took = started.elapsed();
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    assert!(took < Duration::from_millis(1800), "{took:?}");

    locker.batch_execute("COMMIT").await.unwrap();
    completing.await.unwrap().unwrap();
    drop(locker);
    let _ = session.await;
    assert_eq!(
        store
            .reserve(&id("forwarded"), "fp", Duration::from_secs(10))
            .await
            .unwrap(),
        Reservation::Completed(response())
    );
    reserved(&store, &id("new"), "fp", Duration::from_secs(10)).await;
}

/// A reservation whose caller gave up waiting (its deadline passed while it
/// queued behind statements stalled on a locked table) but that the
/// database then took is freed: nobody holds its lease, and its retries
/// would otherwise be refused as in flight until the lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reservation_nobody_waits_for_any_more_is_freed() {
    let schema = TestSchema::create().await;
    let mut config = schema.config();
    config.connect_timeout = Duration::from_millis(500);
    config.statement_timeout = Duration::from_secs(3);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&config).await.unwrap());
    let (locker, conn) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let session = tokio::spawn(conn);
    locker
        .batch_execute("BEGIN; LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    // Both batch workers stall on the lock (3 s, then cancelled) ...
    // (one after the other, so that each is a worker's batch of its own)
    let mut stalled = Vec::new();
    for key in ["a", "b"] {
        let store = store.clone();
        stalled.push(tokio::spawn(async move {
            store.reserve(&id(key), "fp", LONG).await
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ... so this one waits in the queue, and its caller's deadline (4.5 s)
    // passes while its statement, run at 3 s, waits for the lock.
    let gave_up = store.reserve(&id("k"), "fp", LONG).await;
    assert!(
        matches!(gave_up, Err(StoreError::Unavailable(_))),
        "{gave_up:?}"
    );
    let at = started.elapsed();
    assert!(at < Duration::from_millis(5200), "{at:?}");
    tokio::time::sleep(Duration::from_millis(5200).saturating_sub(at)).await;
    locker.batch_execute("COMMIT").await.unwrap();
    for task in stalled {
        assert!(task.await.unwrap().is_err());
    }
    // The statement took the key once the lock went; the store frees it.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        match store.reserve(&id("k"), "fp", LONG).await.unwrap() {
            Reservation::Reserved(_) => break,
            other => assert!(std::time::Instant::now() < deadline, "{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(locker);
    let _ = session.await;
}

/// Well under the store's deadline in `stalling_store` (connect_timeout +
/// statement_timeout + 1 s = 3 s).
const PROMPT: Duration = Duration::from_millis(1500);

/// A store of `pool_size` connections, reaching the database through a
/// relay that can stall them.
async fn stalling_store(
    pool_size: usize,
) -> (TestSchema, pg_support::switch::Switch, Arc<dyn Store>) {
    let schema = TestSchema::create().await;
    let switch = pg_support::switch::Switch::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&schema.url(), switch.addr);
    config.pool_size = pool_size;
    config.connect_timeout = Duration::from_secs(1);
    config.statement_timeout = Duration::from_secs(1);
    let store = Arc::new(PostgresStore::connect(&config).await.unwrap());
    (schema, switch, store)
}

/// What `operation` came to, which must be success within `PROMPT`.
async fn promptly<T: std::fmt::Debug>(
    what: &str,
    operation: impl std::future::Future<Output = Result<T, StoreError>>,
) -> T {
    let started = std::time::Instant::now();
    let result = operation.await;
    let took = started.elapsed();
    match result {
        Ok(done) if took < PROMPT => done,
        other => panic!("{what} after the stall: {other:?} in {took:?}"),
    }
}

/// A connection whose statement got no answer by the store's deadline is
/// closed, never lent again. Behind PgBouncer in session mode with more
/// connections than it has server connections, a statement waits in its
/// queue for as long as other sessions keep the server connections; a
/// server connection can stall (a network, a host). Lent again, such a
/// connection made each later operation handed it wait behind the stale
/// statement and fail at its own deadline: about one request per round of
/// the pool kept failing long after the load dropped. Here the relay holds
/// back the answers of the sessions open at the stall for the rest of the
/// test, and answers the sessions opened after it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_left_without_its_answer_is_not_lent_again() {
    use idemgate::store::ListQuery;
    use std::time::Instant;

    let (schema, switch, store) = stalling_store(3).await;
    // The pool's three connections open: three pings at once hold one each.
    let (a, b, c) = tokio::join!(store.ping(), store.ping(), store.ping());
    for pinged in [a, b, c] {
        pinged.unwrap();
    }

    switch.stall_open_sessions();
    // A reservation (a batch's statement), a ping (a statement of its own)
    // and a ping whose caller stops waiting first (as `/readyz` does), each
    // on a stalled connection.
    let stalled = id("stalled");
    let started = Instant::now();
    let (pinged, left, reserving) = tokio::join!(
        store.ping(),
        tokio::time::timeout(Duration::from_millis(500), store.ping()),
        store.reserve(&stalled, "fp", LONG)
    );
    let took = started.elapsed();
    assert!(
        matches!(pinged, Err(StoreError::Unavailable(_))),
        "{pinged:?}"
    );
    assert!(left.is_err(), "{left:?}");
    assert!(
        matches!(reserving, Err(StoreError::Unavailable(_))),
        "{reserving:?}"
    );
    assert!(took >= Duration::from_millis(2500), "{took:?}");

    // The stalled sessions stay stalled; every operation after is answered
    // at once, on new connections, never behind a stale statement.
    for round in 0..2 {
        let key = format!("after-{round}");
        let lease = match promptly("a reservation", store.reserve(&id(&key), "fp", LONG)).await {
            Reservation::Reserved(lease) => lease,
            other => panic!("{other:?}"),
        };
        promptly("a completion", store.complete(&lease, &response(), LONG)).await;
        assert_eq!(
            promptly("a replay", store.reserve(&id(&key), "fp", LONG)).await,
            Reservation::Completed(response())
        );
        promptly("a read of records", store.records("orders", &key)).await;
        let listing = ListQuery {
            route: "orders".into(),
            state: None,
            limit: 10,
            after: None,
        };
        promptly("a listing", store.list(&listing)).await;
        promptly("a count", store.count()).await;
        promptly("a sweep", store.sweep(100)).await;
        promptly("a purge", store.purge("orders", &key)).await;
        promptly("a ping", store.ping()).await;
    }
    // The stalled connections were closed: their server sessions ended.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let open = pg_support::sessions(&schema.name).await;
        if open <= 3 {
            break;
        }
        assert!(Instant::now() < until, "{open} sessions for a pool of 3");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// ... and so is one whose caller stopped waiting for the answer before the
/// store's deadline, as `/readyz` does after 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_caller_stopped_waiting_is_not_lent_again() {
    let (_schema, switch, store) = stalling_store(1).await;
    store.ping().await.unwrap();
    switch.stall_open_sessions();
    let left = tokio::time::timeout(Duration::from_millis(300), store.ping()).await;
    assert!(left.is_err(), "{left:?}");
    promptly("a ping", store.ping()).await;
    promptly("a reservation", store.reserve(&id("after"), "fp", LONG)).await;
}

/// Under load, reservations and completions share statements (the store's
/// `batch` module): every caller must still get its own answer, and a key
/// asked for several times at once must still be reserved exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_keys_each_get_their_own_answer() {
    use idemgate::store::StoredResponse;
    let store = fresh().await;
    let lease = Duration::from_secs(60);
    let answer = |n: usize| StoredResponse {
        status: 200 + (n % 7) as u16,
        // 0, 1 or 2 headers: the answers' header slices differ in length.
        headers: StoredResponse::header_list(
            (0..n % 3).map(|h| (format!("x-h{h}"), format!("{n}-{h}").into_bytes())),
        ),
        // As the gateway stores an omitted body: none.
        body: if n.is_multiple_of(5) {
            bytes::Bytes::new()
        } else {
            bytes::Bytes::from(format!("body of {n}"))
        },
        body_omitted: n.is_multiple_of(5),
        outcome_unknown: false,
    };
    let reservations: Vec<_> = (0..300)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let n = i % 100;
                let (key, fingerprint) = (id(&format!("k{n}")), format!("fp{n}"));
                (n, store.reserve(&key, &fingerprint, lease).await.unwrap())
            })
        })
        .collect();
    let mut leases = std::collections::HashMap::new();
    for task in reservations {
        match task.await.unwrap() {
            (n, Reservation::Reserved(held)) => {
                assert!(leases.insert(n, held).is_none(), "k{n} reserved twice");
            }
            (_, Reservation::InFlight { .. }) => {}
            (n, other) => panic!("k{n}: {other:?}"),
        }
    }
    assert_eq!(leases.len(), 100, "every key reserved once");

    let completions: Vec<_> = leases
        .into_iter()
        .map(|(n, held)| {
            let store = store.clone();
            let stored = answer(n);
            tokio::spawn(async move { store.complete(&held, &stored, lease).await })
        })
        .collect();
    for task in completions {
        task.await.unwrap().unwrap();
    }

    let replays: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let n = i % 100;
                // Every second ask comes with another payload.
                let fingerprint = if i < 100 {
                    format!("fp{n}")
                } else {
                    "other".into()
                };
                let key = id(&format!("k{n}"));
                (
                    i,
                    n,
                    store.reserve(&key, &fingerprint, lease).await.unwrap(),
                )
            })
        })
        .collect();
    for task in replays {
        let (i, n, got) = task.await.unwrap();
        if i < 100 {
            assert_eq!(got, Reservation::Completed(answer(n)), "k{n}");
        } else {
            assert_eq!(got, Reservation::Mismatch, "k{n}");
        }
    }
}

/// A key the database refuses (text may not hold NUL) fails its own request
/// only, even when it shares a statement with others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_key_fails_alone() {
    let store = fresh().await;
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = id(&if i == 32 {
                    "bad\0key".to_string()
                } else {
                    format!("k{i}")
                });
                (i, store.reserve(&key, "fp", Duration::from_secs(60)).await)
            })
        })
        .collect();
    for task in tasks {
        match task.await.unwrap() {
            (32, result) => assert!(
                matches!(result, Err(StoreError::Unavailable(_))),
                "{result:?}"
            ),
            (i, result) => assert!(
                matches!(result, Ok(Reservation::Reserved(_))),
                "k{i}: {result:?}"
            ),
        }
    }
}

/// A stored answer whose row holds what the store never writes (a restore
/// gone wrong, a hand edit) is `Damaged`, not a store that is down: the
/// record exists, so its request may have run, and `on_store_error = "pass"`
/// must not forward it again.
#[tokio::test]
async fn a_damaged_answer_is_told_apart_from_a_store_that_is_down() {
    let schema = TestSchema::create().await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&schema.config()).await.unwrap());
    let lease = reserved(&store, &id("k"), "fp", LONG).await;
    store.complete(&lease, &response(), LONG).await.unwrap();
    pg_support::admin_sql(&format!(
        "UPDATE {}.idemgate_records SET header_values = header_values[1:0]",
        schema.name
    ))
    .await;
    let got = store.reserve(&id("k"), "fp", LONG).await;
    assert!(matches!(got, Err(StoreError::Damaged(_))), "{got:?}");
}

/// Every replica keeps in-memory copies of answers it replayed. A purge
/// through one replica reaches the others' copies (LISTEN/NOTIFY) before it
/// returns, well within the 5 s a copy may otherwise live: the retry right
/// after it runs again on any replica. It replayed there now and then, the
/// notification still on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_through_one_replica_drops_the_others_copies() {
    use idemgate::config::StoreConfig;
    use std::time::Instant;
    let schema = TestSchema::create().await;
    let config = StoreConfig::Postgres(schema.config());
    let a = idemgate::store::open(&config).await.unwrap();
    let b = idemgate::store::open(&config).await.unwrap();
    // Let both listeners connect (a listener that connects later drops every
    // copy anyway, which would pass this test for the wrong reason).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lease = reserved(&a, &id("k"), "fp", Duration::from_secs(60)).await;
    a.complete(&lease, &response(), Duration::from_secs(3600))
        .await
        .unwrap();
    let replayed = Reservation::Completed(response());
    assert_eq!(
        b.reserve(&id("k"), "fp", Duration::from_secs(60))
            .await
            .unwrap(),
        replayed
    );
    for round in 0..20 {
        let key = format!("k{round}");
        let lease = reserved(&a, &id(&key), "fp", Duration::from_secs(60)).await;
        a.complete(&lease, &response(), Duration::from_secs(3600))
            .await
            .unwrap();
        let got = b.reserve(&id(&key), "fp", Duration::from_secs(60)).await;
        assert_eq!(got.unwrap(), replayed);
        let got = b.reserve(&id(&key), "fp", Duration::from_secs(60)).await;
        assert_eq!(got.unwrap(), replayed, "from b's copy");
        let since = Instant::now();
        assert_eq!(a.purge("orders", &key).await.unwrap(), 1);
        // Well within the 5 s a copy lives, with room for a loaded machine
        // (a purge waits for the other replicas to hear of it).
        let took = since.elapsed();
        assert!(took < Duration::from_secs(3), "round {round}: {took:?}");
        let got = b.reserve(&id(&key), "fp", Duration::from_secs(60)).await;
        assert!(
            matches!(got, Ok(Reservation::Reserved(_))),
            "round {round}: replica b replays a purged key: {got:?}"
        );
    }
}

/// Batches of reservations and of completions that share keys take their
/// rows in one order, so they never deadlock. (Postgres would break such a
/// cycle only after `deadlock_timeout`, 1 s, stalling every request of both
/// batches; the bench's 409 storm on few keys found it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storms_on_few_keys_never_deadlock() {
    async fn deadlocks() -> i64 {
        let (client, conn) =
            tokio_postgres::connect(&pg_support::base_url(), tokio_postgres::NoTls)
                .await
                .unwrap();
        let task = tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap();
        drop(client);
        let _ = task.await;
        row.get(0)
    }
    let store = fresh().await;
    let before = deadlocks().await;
    for round in 0..40 {
        let tasks: Vec<_> = (0..96)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    // 8 keys per round, each asked for 12 times at once.
                    let key = id(&format!("r{round}-k{}", i % 8));
                    let lease = Duration::from_secs(60);
                    if let Reservation::Reserved(held) = store.reserve(&key, "fp", lease).await? {
                        tokio::time::sleep(Duration::from_micros(100 * (i % 7))).await;
                        store.complete(&held, &response(), lease).await?;
                    }
                    Ok::<(), StoreError>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    }
    // A backend reports its counters when it goes idle, within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(deadlocks().await - before, 0, "see the Postgres log");
}

/// A store built outside a runtime, so it runs unbatched (each operation
/// its single-row statement), in a schema of its own.
async fn unbatched_store() -> (TestSchema, Arc<dyn Store>) {
    let schema = TestSchema::create().await;
    let config = schema.config();
    let store = std::thread::spawn(move || PostgresStore::lazy(&config).unwrap())
        .join()
        .unwrap();
    store.migrate().await.unwrap();
    (schema, Arc::new(store))
}

/// A store built outside a runtime runs unbatched: its completion is the
/// single-row statement, which returns the expiry it stored as the batch's
/// does (`complete_returns_the_expiry_it_stored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbatched_completion_returns_the_expiry_it_stored() {
    let (_schema, store) = unbatched_store().await;
    for n in 0..10 {
        let key = id(&format!("k{n}"));
        let lease = reserved(&store, &key, "fp", LONG).await;
        let written = store.complete(&lease, &response(), LONG).await.unwrap();
        let info = store.records(&key.route, &key.key).await.unwrap();
        assert_eq!(info[0].expires_at, Some(written));
        let (_, kept) = store.reserve_with_expiry(&key, "fp", LONG).await.unwrap();
        assert_eq!(kept.unwrap().expires_at, written);
    }
}

/// A store built outside a runtime reserves with the single-key statement
/// (`RESERVE`), not the batch's: a key whose holder died is taken over by
/// the same request only there too, and another one is refused at once
/// (it used to be taken over; a caller reading the row as "not live" would
/// run the statement again until it gave up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbatched_reservation_refuses_another_request_under_a_dead_lease() {
    let (_schema, store) = unbatched_store().await;
    let first = reserved(&store, &id("k"), "fp", Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let got = store.reserve(&id("k"), "other", LONG).await.unwrap();
    assert_eq!(got, Reservation::Mismatch);
    let info = store.records("orders", "k").await.unwrap();
    assert_eq!(info[0].fingerprint, "fp");
    assert_eq!(info[0].lease_expires_at, Some(first.expires_at));
    let second = reserved(&store, &id("k"), "fp", LONG).await;
    assert!(second.token > first.token);
}

/// `serve` on Postgres says once per start what it found of the schema and
/// what it left (it said nothing of the migrations it applied), and
/// `idemgate migrate` prints the same facts.
#[tokio::test]
async fn serve_and_migrate_say_which_schema_they_found_and_left() {
    use common::config::{Config, Store as StoreSection};
    use common::{GatewayProcess, MockUpstream, TestDir};

    let schema = TestSchema::create().await;
    let dir = TestDir::new("pg-serve-schema");
    let upstream = MockUpstream::start().await;
    let template = Config::charges_and_rest().store(StoreSection::postgres(&schema.url()));
    let mut gateway = GatewayProcess::start(&dir, &upstream.url(), &template);
    let schema_lines = |log: &str| -> Vec<String> {
        (log.lines())
            .filter(|line| line.contains("store schema"))
            .map(str::to_owned)
            .collect()
    };
    let lines = schema_lines(&gateway.log_text());
    assert_eq!(lines.len(), 1, "{lines:?}");
    let migrated = &lines[0];
    assert!(migrated.contains("store schema migrated"), "{migrated}");
    assert!(migrated.contains("schema_found=0"), "{migrated}");
    assert!(migrated.contains("schema_version=2"), "{migrated}");
    assert!(migrated.contains("migrations_applied=[1, 2]"), "{migrated}");
    assert!(migrated.contains("store=\"postgres\""), "{migrated}");

    gateway.restart();
    let lines = schema_lines(&gateway.log_text());
    assert_eq!(lines.len(), 2, "{lines:?}");
    let current = &lines[1];
    assert!(current.contains("store schema up to date"), "{current}");
    assert!(current.contains("schema_found=2"), "{current}");
    assert!(current.contains("schema_version=2"), "{current}");
    gateway.kill();

    let migrate = |config: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["migrate", "-c"])
            .arg(config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        migrate(gateway.config_path()),
        "postgres store schema is up to date (version 2)\n"
    );
    let fresh = TestSchema::create().await;
    let config = dir.path("fresh.toml");
    let text = std::fs::read_to_string(gateway.config_path()).unwrap();
    std::fs::write(&config, text.replace(&schema.url(), &fresh.url())).unwrap();
    assert_eq!(
        migrate(&config),
        "postgres store migrated from version 0 to 2 (applied 1, 2)\n"
    );
}

/// A pooled connection the server ends is logged with the server's reason
/// (deadpool's own line said only "Connection error: db error", whatever
/// had happened: a terminated session, a failover, a restart).
#[tokio::test]
async fn a_connection_the_server_ends_is_logged_with_its_reason() {
    use common::config::{Config, Store as StoreSection};
    use common::{GatewayProcess, MockUpstream, TestDir};

    let schema = TestSchema::create().await;
    let dir = TestDir::new("pg-conn-ended");
    let upstream = MockUpstream::start().await;
    let template = Config::charges_and_rest().store(StoreSection::postgres(&schema.url()));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &template);
    let answer = gateway
        .client()
        .post("/v1/charges", Some("conn-ended"), "{}")
        .await;
    assert_eq!(answer.status, 201);
    assert!(pg_support::terminate_sessions(&schema.name).await >= 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = gateway.log_text();
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("postgres connection closed"))
        {
            break line.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        line.contains("terminating connection due to administrator command"),
        "{line}"
    );
    assert!(line.contains("57P01"), "{line}");
    assert!(!gateway.log_text().contains("Connection error: db error"));
}

/// A connection pooler that drops the startup options (PgBouncer under
/// `ignore_startup_parameters = options`) would have the tables made and
/// read in the role's default schema, not the one the URL names: refused,
/// naming the setting and where to put it instead.
#[tokio::test]
async fn a_search_path_a_pooler_drops_is_refused() {
    let schema = TestSchema::create().await;
    let role = TestRole::limited(|role| {
        format!(
            "GRANT USAGE, CREATE ON SCHEMA {0} TO {role};
             ALTER ROLE {role} SET statement_timeout = '5s'",
            schema.name
        )
    })
    .await;
    let relay = pg_support::no_options::NoOptions::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&role.url(&schema.url()), relay.addr);
    let refused = PostgresStore::connect(&config).await.err();
    let msg = refused.expect("refused").to_string();
    assert!(
        msg.contains("lack what the URL's options set (search_path)")
            && msg.contains("ignore_startup_parameters = options")
            && msg.contains("ALTER ROLE"),
        "{msg}"
    );
}

/// The same pooler drops the store's own `statement_timeout`: sessions
/// without one are refused, and the role's own setting, the way through
/// such a pooler, is taken.
#[tokio::test]
async fn a_statement_timeout_a_pooler_drops_is_refused_until_the_role_sets_it() {
    let schema = TestSchema::create().await;
    let role = TestRole::limited(|role| {
        format!(
            "GRANT USAGE, CREATE ON SCHEMA {0} TO {role};
             ALTER ROLE {role} SET search_path = {0}",
            schema.name
        )
    })
    .await;
    let relay = pg_support::no_options::NoOptions::start(pg_support::server_addr()).await;
    let mut config = schema.config();
    config.url = pg_support::via(&role.url(&pg_support::base_url()), relay.addr);
    let refused = PostgresStore::connect(&config).await.err();
    let role_name = &role.name;
    pg_support::admin_sql(&format!(
        "ALTER ROLE {role_name} SET statement_timeout = '5s'"
    ))
    .await;
    let opened = PostgresStore::connect(&config).await;
    let reserved = match &opened {
        Ok(store) => Some(store.reserve(&id("k1"), "f", Duration::from_secs(10)).await),
        Err(_) => None,
    };
    drop(opened);
    let msg = refused.expect("refused").to_string();
    assert!(
        msg.contains("statement_timeout = 0 ms")
            && msg.contains("ALTER ROLE ... SET statement_timeout = '5000ms'"),
        "{msg}"
    );
    assert!(
        matches!(reserved, Some(Ok(Reservation::Reserved(_)))),
        "{reserved:?}"
    );
}

/// A role whose sessions end after a second idle (`idle_session_timeout`,
/// set by a DBA on the role or the database): the purge listener, idle by
/// design, keeps its session (it would reconnect every second, dropping
/// every in-memory copy of an answer each time), and the pool's idle
/// connections the server closes are replaced without a warning each:
/// closing them is what the setting is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_session_timeout_leaves_the_listener_and_the_log_alone() {
    use common::config::{Config, Store as StoreSection};
    use common::{GatewayProcess, MockUpstream, TestDir};

    let schema = TestSchema::create().await;
    let dir = TestDir::new("pg-idle-session-timeout");
    let upstream = MockUpstream::start().await;
    let url = schema.url().replace(
        "options=-c%20search_path",
        "options=-c%20idle_session_timeout%3D700%20-c%20search_path",
    );
    assert_ne!(url, schema.url());
    let template = Config::charges_and_rest().store(StoreSection::postgres(&url));
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &template,
        &[("RUST_LOG", "idemgate=debug")],
    );
    let client = gateway.client();
    let first = client.post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    // Idle for several of the server's timeouts.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let again = client.post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(upstream.executions("k1"), 1);
    let log = gateway.log_text();
    assert!(
        log.contains("idle_session_timeout") || log.contains("57P05"),
        "the server closed no idle connection, so this shows nothing: {log}"
    );
    assert!(
        !log.contains("purge listener disconnected"),
        "the listener lost its session: {log}"
    );
    let warned: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("store::postgres"))
        .collect();
    assert!(warned.is_empty(), "{warned:#?}");
}

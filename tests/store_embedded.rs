//! The conformance suite against `EmbeddedStore`, plus file-level behaviour.

mod common;
mod store_conformance;

use common::owned_store::OwnedStore;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemgate::store::embedded::SCHEMA_VERSION;
use idemgate::store::{
    EmbeddedCause, EmbeddedStore, ReplayCache, Reservation, Store, StoreError, Unavailable,
};
use store_conformance::{id, reserved, response};

/// A fresh path per test under the system temp dir.
fn temp_db() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idemgate-store-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("nested").join("store.db")
}

/// Removes the test's directory once the store (and its thread) is gone.
struct TempDirGuard(PathBuf);

impl Drop for TempDirGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent().and_then(|p| p.parent()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A store file made by this binary, then changed behind its back by `edit`.
fn made_then_edited(edit: impl FnOnce(&rusqlite::Connection)) -> (PathBuf, TempDirGuard) {
    let path = temp_db();
    let dir = TempDirGuard(path.clone());
    drop(EmbeddedStore::open(&path).unwrap());
    edit(&rusqlite::Connection::open(&path).unwrap());
    (path, dir)
}

async fn fresh() -> Arc<dyn Store> {
    let path = temp_db();
    // Field order: the store (joining its thread) drops before the directory.
    Arc::new(OwnedStore {
        store: Arc::new(EmbeddedStore::open(&path).unwrap()),
        guard: TempDirGuard(path),
    })
}

/// The store as `serve` opens it: with its in-memory copies of replays.
async fn fresh_cached() -> Arc<dyn Store> {
    let path = temp_db();
    let store = EmbeddedStore::open(&path).unwrap();
    Arc::new(OwnedStore {
        store: Arc::new(ReplayCache::new(store, 1024 * 1024)),
        guard: TempDirGuard(path),
    })
}

store_conformance::conformance_tests!(fresh().await);

mod with_replay_cache {
    use super::*;
    store_conformance::conformance_tests!(fresh_cached().await);

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_replays_of_a_large_answer_share_one_read() {
        store_conformance::concurrent_replays_of_a_large_answer_share_one_read(
            fresh_cached().await,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn durable_across_reopen() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let store = EmbeddedStore::open(&path).unwrap();
    let lease = reserved(
        &(Arc::new(store.clone()) as Arc<dyn Store>),
        &id("k"),
        "fp",
        Duration::from_secs(60),
    )
    .await;
    store
        .complete(&lease, &response(), Duration::from_secs(60))
        .await
        .unwrap();
    drop(store);

    let store = EmbeddedStore::open(&path).unwrap();
    let got = store
        .reserve(&id("k"), "fp", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got, Reservation::Completed(response()));
    store.ping().await.unwrap();
    assert_eq!(store.backend(), "embedded");
}

#[tokio::test]
async fn newer_schema_refused() {
    let (path, _dir) = made_then_edited(|conn| {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    });
    let err = EmbeddedStore::open(&path)
        .err()
        .expect("newer schema must be refused");
    let StoreError::Unavailable(Unavailable::Embedded(EmbeddedCause::SchemaNewer {
        path: named,
        found,
        supported,
    })) = &err
    else {
        panic!("unexpected {err:?}");
    };
    assert_eq!(
        (named, *found, *supported),
        (&path, SCHEMA_VERSION + 1, SCHEMA_VERSION)
    );
    let msg = err.to_string();
    assert!(msg.contains("newer"), "{msg}");
    assert!(msg.contains(&format!("{}", SCHEMA_VERSION + 1)), "{msg}");
}

/// What an older gateway serving the file looks like from here: a file of
/// version 2 (before the outcome-unknown mark), and the serve lock held by
/// someone else.
fn served_by_an_older_gateway() -> (PathBuf, TempDirGuard, std::fs::File) {
    let (path, dir) = made_then_edited(|conn| {
        conn.execute_batch(
            "DROP INDEX records_listing;
             ALTER TABLE records DROP COLUMN outcome_unknown;
             PRAGMA user_version = 2;",
        )
        .unwrap();
    });
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let lock = std::fs::File::create(&lock).unwrap();
    lock.try_lock().unwrap();
    (path, dir, lock)
}

fn file_version(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

/// `keys`, `sweep` and `migrate` of a newer binary, run beside an older
/// gateway that still serves the file, leave the file as it is: migrating
/// it under that gateway left it running on a schema it refuses at its
/// next start (and its later outcome-unknown answers unmarked).
#[tokio::test]
async fn a_file_an_older_gateway_serves_is_not_migrated_under_it() {
    let (path, _dir, lock) = served_by_an_older_gateway();
    for err in [
        EmbeddedStore::migrate(&path).expect_err("migrate refused"),
        EmbeddedStore::open(&path)
            .err()
            .expect("keys/sweep refused"),
    ] {
        assert!(
            matches!(
                &err,
                StoreError::Unavailable(Unavailable::Embedded(EmbeddedCause::ServedOlder {
                    found: 2,
                    supported: SCHEMA_VERSION,
                    ..
                }))
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("version 2 is served by a running idemgate")
                && msg.contains("stop that gateway"),
            "{msg}"
        );
    }
    assert_eq!(file_version(&path), 2, "the file is left as it was");
    drop(lock);
    // Once that gateway has stopped, the new binary migrates the file.
    assert_eq!(EmbeddedStore::migrate(&path).unwrap().found, 2);
    assert_eq!(file_version(&path), SCHEMA_VERSION);
}

/// A gateway of this version serving the file migrated it already: the
/// commands open it beside that gateway as ever.
#[tokio::test]
async fn a_file_a_gateway_of_this_version_serves_opens_beside_it() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    drop(EmbeddedStore::open(&path).unwrap());
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let lock = std::fs::File::create(&lock).unwrap();
    lock.try_lock().unwrap();
    EmbeddedStore::open(&path).unwrap().ping().await.unwrap();
    assert_eq!(EmbeddedStore::migrate(&path).unwrap().found, SCHEMA_VERSION);
}

/// `idemgate sweep` beside a serving gateway leaves the in-flight records
/// whose lease the wall clock says ended to that gateway's own sweeper: only
/// the gateway knows whether such a lease is one of its running requests
/// (its wall clock stepped: docs/guarantees.md), and deleting one would fence
/// its answer off and let a retry run it again. Expired answers go as ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_beside_a_serving_gateway_leaves_its_leases_to_it() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let served: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
    reserved(&served, &id("running"), "fp", Duration::from_millis(50)).await;
    let done = reserved(&served, &id("done"), "fp", Duration::from_secs(30)).await;
    served
        .complete(&done, &response(), Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let lock = std::fs::File::create(&lock).unwrap();
    lock.try_lock().unwrap();
    let beside = EmbeddedStore::open(&path).unwrap();
    assert_eq!(
        beside.sweep(100).await.unwrap(),
        1,
        "the expired answer only"
    );
    drop(lock);
    assert_eq!(
        served.sweep(100).await.unwrap(),
        1,
        "the lease, by its holder"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_share_one_thread_and_outlive_clones() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let store = EmbeddedStore::open(&path).unwrap();
    let clone = store.clone();
    drop(store);
    clone.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sweeper_drains_the_backlog_in_batches() {
    let store: Arc<dyn Store> = fresh().await;
    for i in 0..5 {
        let lease = reserved(&store, &id(&format!("k{i}")), "fp", Duration::from_secs(60)).await;
        store
            .complete(&lease, &response(), Duration::from_millis(1))
            .await
            .unwrap();
    }
    reserved(&store, &id("flying"), "fp", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let swept = Arc::new(AtomicU64::new(0));
    let counter = swept.clone();
    let task = idemgate::store::spawn_sweeper(
        store.clone(),
        Duration::from_millis(20),
        2,
        Arc::new(move |n| {
            counter.fetch_add(n, Ordering::SeqCst);
        }),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while swept.load(Ordering::SeqCst) < 5 {
        assert!(tokio::time::Instant::now() < deadline, "sweeper stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
    assert_eq!(swept.load(Ordering::SeqCst), 5);
    assert_eq!(store.records("orders", "flying").await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_tokens_keep_rising_across_batches_and_reopen() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let mut last = 0;
    for round in 0..3 {
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
        // Concurrent reservations share batches; each batch hands tokens out
        // in memory and writes the counter back once.
        let leases = futures_util::future::join_all((0..20).map(|n| {
            let store = store.clone();
            async move {
                reserved(
                    &store,
                    &id(&format!("k{round}-{n}")),
                    "fp",
                    Duration::from_secs(60),
                )
                .await
            }
        }))
        .await;
        let mut tokens: Vec<i64> = leases.iter().map(|lease| lease.token).collect();
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 20, "every lease has its own token");
        assert!(tokens[0] > last, "round {round}: {tokens:?} after {last}");
        last = tokens[19];
    }
}

#[tokio::test]
async fn a_file_with_the_old_expiry_index_is_migrated_and_the_sweep_uses_the_new_one() {
    // As files made before the index covered completed rows only.
    let (path, _dir) = made_then_edited(|conn| {
        conn.execute_batch(
            "DROP INDEX records_expiry;
             CREATE INDEX records_expires_at ON records (expires_at);",
        )
        .unwrap();
    });
    drop(EmbeddedStore::open(&path).unwrap());

    let conn = rusqlite::Connection::open(&path).unwrap();
    let column = |sql: &str, index: usize| -> Vec<String> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |row| row.get(index))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let indexes = column(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' AND sql IS NOT NULL ORDER BY name",
        0,
    );
    assert_eq!(indexes, ["records_expiry", "records_listing"]);
    let plan = column(
        "EXPLAIN QUERY PLAN SELECT rowid FROM records WHERE expires_at <= 5 AND state = 1 LIMIT 10",
        3,
    );
    assert!(
        plan.iter().any(|step| step.contains("records_expiry")),
        "the sweep scans the expiry index: {plan:?}"
    );
}

/// Version 1 files keyed records by (route, scope, key); opening one moves
/// its rows, answers and in-flight leases alike, under the new primary key.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_1_file_keeps_its_records_under_the_new_primary_key() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let (done, running) = {
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
        let done = reserved(&store, &id("done"), "fp", Duration::from_secs(60)).await;
        store
            .complete(&done, &response(), Duration::from_secs(600))
            .await
            .unwrap();
        let running = reserved(&store, &id("running"), "fp", Duration::from_secs(600)).await;
        (done, running)
    };
    // Back to version 1's shape, as that binary made it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v1_table: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'records'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        v1_table.contains("PRIMARY KEY (route, key, scope)"),
        "{v1_table}"
    );
    conn.execute_batch(&format!(
        "{};
         INSERT INTO records_v1 SELECT * FROM records;
         DROP TABLE records;
         ALTER TABLE records_v1 RENAME TO records;
         CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
         PRAGMA user_version = 1;",
        v1_table.replacen("records", "records_v1", 1).replace(
            "PRIMARY KEY (route, key, scope)",
            "PRIMARY KEY (route, scope, key)"
        )
    ))
    .unwrap();
    drop(conn);

    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
    assert_eq!(
        store
            .reserve(&id("done"), "fp", Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::Completed(response())
    );
    assert!(matches!(
        store
            .reserve(&id("running"), "fp", Duration::from_secs(60))
            .await
            .unwrap(),
        Reservation::InFlight { .. }
    ));
    assert_eq!(store.records("orders", "done").await.unwrap().len(), 1);
    // The lease still holds, and new tokens continue the stored counter.
    store
        .complete(&running, &response(), Duration::from_secs(60))
        .await
        .unwrap();
    let next = reserved(&store, &id("next"), "fp", Duration::from_secs(60)).await;
    assert!(next.token > done.token.max(running.token), "{next:?}");
    drop(store);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT scope FROM records WHERE route = 'orders' AND key = 'done'",
        )
        .unwrap()
        .query_map([], |row| row.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter().any(|step| step.contains("route=? AND key=?")),
        "a key's records are one range of the primary key: {plan:?}"
    );
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'records_expiry'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 1);
}

/// Answers go back through a task on the runtime that opened the store; a
/// store that outlives that runtime still answers (from its own thread).
#[test]
fn a_store_outliving_the_runtime_that_opened_it_still_answers() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let opening = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = opening.block_on(async { EmbeddedStore::open(&path).unwrap() });
    opening.block_on(async { store.ping().await.unwrap() });
    drop(opening);

    let later = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    later.block_on(async {
        let answered = tokio::time::timeout(Duration::from_secs(5), store.ping()).await;
        assert!(matches!(answered, Ok(Ok(()))), "{answered:?}");
    });
}

/// A file overwritten in place under the store (same inode, so not "gone"):
/// every operation fails "malformed", and the ping behind `/readyz` must
/// fail with it rather than answer a constant.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_damaged_under_the_store_fails_its_ping() {
    use std::io::{Seek, SeekFrom, Write};
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let store = EmbeddedStore::open(&path).unwrap();
    for n in 0..200 {
        let key = format!("k{n}");
        let lease = reserved(
            &(Arc::new(store.clone()) as Arc<dyn Store>),
            &id(&key),
            "fp",
            Duration::from_secs(60),
        )
        .await;
        store
            .complete(&lease, &response(), Duration::from_secs(60))
            .await
            .unwrap();
    }
    store.ping().await.unwrap();
    // Everything into the file itself, then every page but the first
    // (the schema) overwritten.
    rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let length = file.metadata().unwrap().len();
    file.seek(SeekFrom::Start(4096)).unwrap();
    let garbage: Vec<u8> = (0..length.saturating_sub(4096))
        .map(|n| (n * 7 + 13) as u8)
        .collect();
    file.write_all(&garbage).unwrap();
    drop(file);

    let ping = store.ping().await;
    assert!(
        matches!(&ping, Err(e @ StoreError::Unavailable(_)) if e.to_string().contains("malformed")),
        "{ping:?}"
    );
    drop(store);
}

/// A reader left in a transaction holds back checkpoints and the WAL grows;
/// once it is gone the WAL is truncated back to its limit (16 MiB) instead
/// of keeping its largest size until the gateway restarts.
#[tokio::test(flavor = "multi_thread")]
async fn the_wal_shrinks_back_after_checkpoints_were_held_back() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let store = EmbeddedStore::open(&path).unwrap();
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal_size = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    let big = idemgate::store::StoredResponse {
        body: bytes::Bytes::from(vec![7u8; 1024 * 1024]),
        ..response()
    };
    let store_answers = |from: usize, to: usize| {
        let (store, big) = (store.clone(), big.clone());
        async move {
            for n in from..to {
                let key = format!("big-{n}");
                let lease = reserved(
                    &(Arc::new(store.clone()) as Arc<dyn Store>),
                    &id(&key),
                    "fp",
                    Duration::from_secs(60),
                )
                .await;
                store
                    .complete(&lease, &big, Duration::from_secs(60))
                    .await
                    .unwrap();
            }
        }
    };

    let reader = rusqlite::Connection::open(&path).unwrap();
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM records;")
        .unwrap();
    store_answers(0, 24).await;
    assert!(wal_size() > 20 * 1024 * 1024, "{}", wal_size());
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);

    // The next checkpoints catch up; a write after one restarts the WAL.
    for round in 0..20 {
        store_answers(100 + round * 4, 104 + round * 4).await;
        if wal_size() <= 17 * 1024 * 1024 {
            break;
        }
    }
    assert!(wal_size() <= 17 * 1024 * 1024, "{}", wal_size());
    drop(store);
}

/// A lease's row hint (`Lease::row`) only saves a lookup: pointing at another
/// record's row (as after an operator's `VACUUM` renumbered rows), or at no
/// row, the completion and the release still find their own record by key,
/// and never touch the record the hint names.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_row_hint_is_wrong_still_completes_and_releases_its_own_record() {
    let store = fresh().await;
    let long = Duration::from_secs(60);
    let mine = reserved(&store, &id("mine"), "fp", long).await;
    let other = reserved(&store, &id("other"), "fp", long).await;
    let (Some(mine_row), Some(other_row)) = (mine.row, other.row) else {
        panic!("the embedded store names its rows: {mine:?} {other:?}");
    };
    assert_ne!(mine_row, other_row);

    // Completed through a hint that names the other record's row.
    let misled = idemgate::store::Lease {
        row: Some(other_row),
        ..mine.clone()
    };
    store.complete(&misled, &response(), long).await.unwrap();
    assert_eq!(
        store.reserve(&id("mine"), "fp", long).await.unwrap(),
        Reservation::Completed(response())
    );
    assert!(
        matches!(
            store.reserve(&id("other"), "fp", long).await.unwrap(),
            Reservation::InFlight { .. }
        ),
        "the record the hint named is untouched"
    );

    // Released through a hint that names no row at all.
    let lost = idemgate::store::Lease {
        row: Some(i64::MAX),
        ..other.clone()
    };
    store.release(&lost).await.unwrap();
    reserved(&store, &id("other"), "fp", long).await;

    // A stale lease is fenced whichever way it finds the row.
    let stale = idemgate::store::Lease { row: None, ..mine };
    assert!(matches!(
        store.complete(&stale, &response(), long).await,
        Err(StoreError::Fenced)
    ));
}

/// A completion that meets a failure that may pass (here another process
/// holding the write lock past the store's 5 s busy timeout, as a full disk
/// would) is tried again while its lease holds: the request has run, and an
/// answer not recorded would leave its key to a takeover that runs it again.
#[tokio::test]
async fn a_completion_outlasts_a_failure_that_passes_within_its_lease() {
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).unwrap());
    let key = id("held-by-another-process");
    let lease = reserved(&store, &key, "fp", Duration::from_secs(60)).await;

    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn({
        let path = path.clone();
        move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(6500));
            conn.execute_batch("COMMIT").unwrap();
        }
    });
    locked_rx.recv().unwrap();

    let written = store
        .complete(&lease, &response(), Duration::from_secs(60))
        .await;
    holder.join().unwrap();
    assert!(written.is_ok(), "{written:?}");
    let records = store.records(&key.route, &key.key).await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, Some(201), "{records:?}");
}

/// Sets the gateway's soft file-size limit (`prlimit`, util-linux), as
/// `ulimit -f` or systemd's `LimitFSIZE` would: past it a write fails.
fn file_size_limit(gateway: &common::GatewayProcess, limit: &str) {
    let status = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &gateway.pid().to_string(),
            &format!("--fsize={limit}:"),
        ])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --fsize={limit}: {status}");
}

/// A file-size limit reached while serving (`ulimit -f`, systemd's
/// `LimitFSIZE`, put here on the running gateway) is a full disk to the
/// store, not the end of the process: SIGXFSZ, whose default action ended it
/// and every connection with it, is taken over. Keyed requests that need a
/// write are refused 503 `store-unavailable` with nothing forwarded, while
/// the process serves (`/readyz` stays 200, as for a full disk:
/// docs/guarantees.md) and replays go on; given room, keyed requests run
/// again with no restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_size_limit_is_a_full_disk_not_the_end_of_the_process() {
    use common::config::{Config, Route, Upstream};
    let config = Config::new()
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let (_dir, upstream, gateway) =
        common::GatewayProcess::start_fresh("store-file-size-limit", &config).await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    assert_eq!(
        client
            .post("/v1/charges", Some("before"), "{}")
            .await
            .status,
        201
    );

    file_size_limit(&gateway, "1");
    let mut refused = None;
    for n in 0..200 {
        let key = format!("during-{n}");
        let reply = client.post("/v1/charges", Some(&key), "{}").await;
        if reply.status == 503 {
            refused = Some((key, reply));
            break;
        }
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let (key, reply) = refused.expect("no write failed past the file-size limit");
    assert_eq!(
        reply.json()["code"],
        "store-unavailable",
        "{}",
        reply.text()
    );
    assert_eq!(upstream.executions(&key), 0);
    let replay = client.post("/v1/charges", Some("before"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(admin.get("/readyz").await.status, 200);

    file_size_limit(&gateway, "unlimited");
    assert_eq!(
        client.post("/v1/charges", Some(&key), "{}").await.status,
        201
    );
    assert_eq!(upstream.executions(&key), 1);
    assert_eq!(upstream.executions("before"), 1);
    assert!(
        gateway
            .log_text()
            .contains("store transactions commit again")
    );
    assert!(!gateway.log_text().contains("panicked"));
}

/// A reload reads the config's store path again (is it still a store
/// file?). Read with a descriptor of its own, closing it dropped every
/// POSIX lock the gateway held on the file, SQLite's included: the next
/// process to close a connection to the file (the `sqlite3` shell, a
/// backup tool) then found itself the last one, checkpointed and deleted
/// the WAL under the running gateway, which refused every request until
/// restarted.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_keeps_the_gateway_s_locks_on_its_store_file() {
    use common::admin::{TOKEN_ENV, bearer, start_with_token};
    use common::config::{Config, Route, Upstream};
    let config = Config::new()
        .upstream(Upstream::api())
        .admin_token_env(TOKEN_ENV)
        .route(Route::api("charges", "/v1/charges"));
    let (dir, _upstream, gateway) = start_with_token("store-reload-locks", &config, "tok").await;
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("a"), "{}").await.status,
        201
    );
    let auth = [("authorization", bearer("tok"))];
    let auth: Vec<(&str, &str)> = auth.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let reload = gateway
        .admin_client()
        .send("POST", "/admin/reload", &auth, "")
        .await;
    assert_eq!(reload.status, 200, "{}", reload.text());

    let db = dir.path("store.db");
    let wal = dir.path("store.db-wal");
    // Another process (Python's sqlite3, as a backup script or an
    // operator's look would be) opens the file, reads, and closes it.
    let read = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             print(c.execute('SELECT count(*) FROM records').fetchone()[0]); c.close()",
        ])
        .arg(&db)
        .output()
        .expect("python3 runs");
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "1",
        "{read:?}"
    );
    assert!(wal.exists(), "another process's close deleted the WAL");
    // The store's watch looks once a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = client.post("/v1/charges", Some("b"), "{}").await;
    assert_eq!(after.status, 201, "{}", after.text());
}

/// A store that refuses every request until idemgate restarts (its file
/// deleted while serving, here; a failed sync alike) makes `/healthz` fail
/// too, saying why: a liveness probe (or the image's `HEALTHCHECK`) then
/// restarts the process, which no readiness probe does. It answered 200 for
/// as long as the process ran, and the gateway stayed out of service until
/// someone restarted it by hand.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_stopped_until_a_restart_fails_the_liveness_probe() {
    use common::config::{Config, Route, Upstream};
    let config = Config::new()
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let (dir, _upstream, gateway) =
        common::GatewayProcess::start_fresh("store-gone-liveness", &config).await;
    let client = gateway.client();
    let admin = gateway.admin_client();
    assert_eq!(
        client.post("/v1/charges", Some("a"), "{}").await.status,
        201
    );
    assert_eq!(admin.get("/healthz").await.status, 200);
    std::fs::remove_file(dir.path("store.db")).unwrap();
    // The store looks at its file at most once a second, before a batch.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    loop {
        n += 1;
        let reply = client
            .post("/v1/charges", Some(&format!("b{n}")), "{}")
            .await;
        if reply.status == 503 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the deletion went unseen"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let health = admin.get("/healthz").await;
    assert_eq!(health.status, 503, "{}", health.text());
    assert!(health.text().contains("deleted"), "{}", health.text());
}

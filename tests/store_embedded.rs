//! The conformance suite against `EmbeddedStore`, plus file-level behaviour.

mod common;
mod store_conformance;

use common::owned_store::OwnedStore;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemgate::store::embedded::SCHEMA_VERSION;
use idemgate::store::{EmbeddedStore, ReplayCache, Reservation, Store, StoreError};
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
    let path = temp_db();
    let _dir = TempDirGuard(path.clone());
    drop(EmbeddedStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = EmbeddedStore::open(&path)
        .err()
        .expect("newer schema must be refused");
    let StoreError::Unavailable(msg) = err else {
        panic!("unexpected {err:?}");
    };
    assert!(msg.contains("newer"), "{msg}");
    assert!(msg.contains(&format!("{}", SCHEMA_VERSION + 1)), "{msg}");
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

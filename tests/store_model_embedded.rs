//! The store model (see `store_model/mod.rs`) against `EmbeddedStore`, on a
//! fresh file per case and a manual clock shared by the store and the model.

mod store_model;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idemgate::store::EmbeddedStore;
use store_model::{Backend, ManualClock};

/// Removes a case's directory once the store (and its thread) is gone.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    // tmpfs when there is one: each operation is a synchronous commit.
    let shm = PathBuf::from("/dev/shm");
    let base = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    base.join(format!(
        "idemgate-store-model-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[test]
fn embedded_store_follows_the_model() {
    store_model::check(64, || async {
        let dir = temp_dir();
        let _ = std::fs::remove_dir_all(&dir);
        let clock = ManualClock::new();
        let store = EmbeddedStore::open_with_clock(&dir.join("store.db"), clock.store_clock())
            .expect("open the store");
        Backend {
            store: Arc::new(store),
            clock,
            guard: Box::new(TempDir(dir)),
        }
    });
}

/// The same model on the wall clock, as a store with its own clock (Postgres)
/// runs it: fewer cases, since `Advance` sleeps.
#[test]
fn embedded_store_follows_the_model_on_the_wall_clock() {
    store_model::check(8, || async {
        let dir = temp_dir();
        let _ = std::fs::remove_dir_all(&dir);
        let store = EmbeddedStore::open(&dir.join("store.db")).expect("open the store");
        Backend {
            store: Arc::new(store),
            clock: Arc::new(store_model::RealClock),
            guard: Box::new(TempDir(dir)),
        }
    });
}

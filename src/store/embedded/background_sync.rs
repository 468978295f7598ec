//! `Durability::ProcessCrash`: the WAL synced behind the writer, not before
//! its answers leave.
//!
//! The writer answers a batch once it is committed (in the OS page cache)
//! and tells this thread there is something to sync. The thread syncs the
//! WAL, then rests `INTERVAL` before it looks again, so a power loss loses
//! at most the answers of the last interval and a sync (never the file:
//! SQLite's `synchronous = NORMAL` still syncs around every checkpoint).
//! Keeping the WAL synced also keeps those checkpoint syncs short: without
//! this thread, each one would write megabytes of WAL while the writer, and
//! every request waiting on it, stood still (docs/adr/0004-embedded-store.md). An idle store
//! is not synced at all.
//!
//! A failed sync leaves what is on disk unknown, as in the default mode:
//! the writer then refuses every operation until idemgate restarts.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::cause::EmbeddedCause;
use super::wal_sync::{SyncWal, sync_failed};
use crate::store::StoreError;

/// The longest an acknowledged answer waits, under load, for its sync.
pub(super) const INTERVAL: Duration = Duration::from_millis(20);

/// The writer's side of the syncing thread; dropping it syncs what is left
/// and ends the thread.
pub(super) struct BackgroundSync {
    dirty: Option<SyncSender<()>>,
    /// Never sent on: dropping it cuts the thread's rest short at shutdown.
    closing: Option<Sender<()>>,
    failed: Arc<Mutex<Option<EmbeddedCause>>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundSync {
    pub(super) fn start(sync_wal: SyncWal, interval: Duration) -> Result<Self, StoreError> {
        // One pending signal is enough: the sync takes whatever is there.
        let (dirty, signals) = mpsc::sync_channel(1);
        let (closing, closed) = mpsc::channel();
        let failed = Arc::new(Mutex::new(None));
        let thread = std::thread::Builder::new()
            .name("idemgate-sync".into())
            .spawn({
                let failed = failed.clone();
                move || run(sync_wal, &signals, &closed, &failed, interval)
            })
            .map_err(|e| EmbeddedCause::thread("sync", e))?;
        Ok(BackgroundSync {
            dirty: Some(dirty),
            closing: Some(closing),
            failed,
            thread: Some(thread),
        })
    }

    /// A batch wrote to the WAL: sync it soon.
    pub(super) fn committed(&self) {
        // Full: a sync is already due. Disconnected: the thread stopped after
        // a failed sync, which `failure` reports.
        if let Some(dirty) = &self.dirty {
            let _ = dirty.try_send(());
        }
    }

    /// Why the last sync failed, once one has.
    pub(super) fn failure(&self) -> Option<EmbeddedCause> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for BackgroundSync {
    fn drop(&mut self) {
        self.dirty.take();
        self.closing.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the store's sync thread panicked");
        }
    }
}

fn run(
    mut sync_wal: SyncWal,
    signals: &Receiver<()>,
    closed: &Receiver<()>,
    failed: &Mutex<Option<EmbeddedCause>>,
    interval: Duration,
) {
    // Ends once the writer has gone and its last signal was taken (synced).
    while signals.recv().is_ok() {
        if let Err(e) = sync_wal() {
            *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(sync_failed(e));
            return;
        }
        // The rest; at shutdown `closed` disconnects and ends it at once.
        let _ = closed.recv_timeout(interval);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use super::*;

    #[test]
    fn closing_syncs_what_is_left_without_waiting_out_the_rest() {
        let synced = Arc::new(AtomicUsize::new(0));
        let sync: SyncWal = Box::new({
            let synced = synced.clone();
            move || {
                synced.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        });
        let background = BackgroundSync::start(sync, Duration::from_secs(60)).unwrap();
        background.committed();
        for _ in 0..400 {
            if synced.load(Ordering::SeqCst) == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            synced.load(Ordering::SeqCst),
            1,
            "the first commit is synced"
        );
        // Committed during the rest: synced when the store closes, at once.
        background.committed();
        let closing = Instant::now();
        drop(background);
        assert!(
            closing.elapsed() < Duration::from_secs(30),
            "closing waited out the rest: {:?}",
            closing.elapsed()
        );
        assert_eq!(
            synced.load(Ordering::SeqCst),
            2,
            "the last commit is synced"
        );
    }
}

//! Makes committed batches durable, beside the writer rather than inside it.
//!
//! The writer commits with `synchronous = NORMAL`: the commit's WAL frames
//! reach the page cache, not the disk. This thread then `fdatasync`s the WAL
//! file and only then lets the batch's replies go, so an acknowledged answer
//! is on disk exactly as with `FULL`. What changes is who waits: with `FULL`
//! the writer sat in the fsync inside `COMMIT` while new jobs queued behind
//! it; now it runs those jobs while this thread waits on the disk, and
//! commits them when the sync ends (`writer`).
//!
//! **A failed sync stops the store.** After `fdatasync` fails, the kernel may
//! have dropped the unwritten pages and a later sync can succeed without
//! them; SQLite's recovery reads the WAL's frames as one checksummed chain and
//! stops at the first bad one, so every commit after the lost frames would be
//! lost too. Nothing is acknowledged after that: every batch, then and later,
//! is answered `Unavailable` until the gateway is restarted (Postgres makes
//! the same choice and stops on a failed fsync).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use super::replies::Replies;
use super::writer::{Input, Job};

/// Flushes the WAL file's data to the disk (`File::sync_data` in the store).
pub(super) type Flush = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// A batch the writer has finished: committed (waiting to be made durable)
/// or failed (its error).
struct Committed {
    jobs: Vec<Box<dyn Job>>,
    error: Option<String>,
    /// Whether the batch wrote anything; a batch that only read needs a sync
    /// only if an earlier one is still unsynced, and that one syncs first.
    wrote: bool,
}

/// The writer's handle on the sync thread; dropping it finishes the batches
/// already handed over and joins the thread.
pub(super) struct Syncer {
    batches: Option<Sender<Committed>>,
    thread: Option<JoinHandle<()>>,
    failed: Arc<AtomicBool>,
}

impl Syncer {
    /// `writer` is told of every sync, so it commits its next batch then.
    pub(super) fn start(
        flush: Flush,
        replies: Replies,
        writer: Sender<Input>,
    ) -> std::io::Result<Syncer> {
        let (batches, committed) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let thread = std::thread::Builder::new()
            .name("idemgate-sync".into())
            .spawn(move || run(committed, flush, replies, &writer, &flag))?;
        Ok(Syncer {
            batches: Some(batches),
            thread: Some(thread),
            failed,
        })
    }

    /// The reason to refuse new batches, once a sync has failed.
    pub(super) fn refusal(&self) -> Option<&'static str> {
        self.failed.load(Ordering::Acquire).then_some(SYNC_FAILED)
    }

    /// Hands over a finished batch (committed, or failed with `error`); its
    /// replies go once it is on disk. Returns whether a committed batch went
    /// to be synced: the writer then waits for `Input::Synced` to commit again.
    pub(super) fn send(&self, jobs: Vec<Box<dyn Job>>, error: Option<String>, wrote: bool) -> bool {
        let committed = error.is_none();
        let batch = Committed { jobs, error, wrote };
        let refused = match &self.batches {
            Some(batches) => batches.send(batch).err().map(|e| e.0),
            None => Some(batch),
        };
        // The sync thread is gone (it panicked): nothing can be made durable.
        if let Some(batch) = refused {
            for job in batch.jobs {
                job.finish(Some("the store's sync thread has stopped"));
            }
            return false;
        }
        committed
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.batches.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the store's sync thread panicked");
        }
    }
}

const SYNC_FAILED: &str =
    "syncing the store file failed earlier; nothing is acknowledged until the gateway restarts";

fn run(
    committed: Receiver<Committed>,
    mut flush: Flush,
    replies: Replies,
    writer: &Sender<Input>,
    failed: &AtomicBool,
) {
    while let Ok(first) = committed.recv() {
        let mut group = vec![first];
        while let Ok(batch) = committed.try_recv() {
            group.push(batch);
        }
        let durable = if failed.load(Ordering::Acquire) {
            Err(SYNC_FAILED.to_owned())
        } else if group.iter().any(|b| b.wrote) {
            flush().map_err(|e| {
                failed.store(true, Ordering::Release);
                tracing::error!(error = %e, "fdatasync of the store's WAL failed; the store refuses every operation until the gateway restarts");
                format!("syncing the store file failed: {e}")
            })
        } else {
            Ok(())
        };
        // First, so the writer commits its next batch while these replies go.
        // (It may have stopped; then nobody waits for this.)
        let synced = group.iter().filter(|b| b.error.is_none()).count();
        let _ = writer.send(Input::Synced(synced));
        for batch in group {
            let error = match &durable {
                Err(sync) => Some(batch.error.unwrap_or_else(|| sync.clone())),
                Ok(()) => batch.error,
            };
            replies.send(batch.jobs, error);
        }
    }
}

//! The background task that deletes records past their retention, and
//! leases that ran out without an answer, for any backend (`Store::sweep`).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Store;

/// Every `interval`, sweeps batches of up to `batch` expired records until a
/// batch comes back short (the backlog is gone). `on_swept` is told each
/// non-zero count (metrics). Errors are logged and retried next interval.
///
/// After each full batch the sweeper waits as long as the batch took, so a
/// backlog takes at most half of the store's time: back to back, the batches
/// of a million-record backlog hold the embedded store's one writer so that
/// new keys fall to a sixth of their rate (bench/README.md, "At scale").
pub fn spawn_sweeper(
    store: Arc<dyn Store>,
    interval: Duration,
    batch: u32,
    on_swept: Arc<dyn Fn(u64) + Send + Sync>,
) -> JoinHandle<()> {
    // A zero batch would never come back short.
    let batch = batch.max(1);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            loop {
                let started = tokio::time::Instant::now();
                match store.sweep(batch).await {
                    Ok(n) => {
                        if n > 0 {
                            on_swept(n);
                        }
                        if n < u64::from(batch) {
                            break;
                        }
                        tokio::time::sleep(started.elapsed()).await;
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, backend = store.backend(), "sweeping expired records failed");
                        break;
                    }
                }
            }
        }
    })
}

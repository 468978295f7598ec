//! The background task that deletes records past their retention, for any backend.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Store;

/// Every `interval`, sweeps batches of up to `batch` expired records until a
/// batch comes back short (the backlog is gone). `on_swept` is told each
/// non-zero count (metrics). Errors are logged and retried next interval.
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
                match store.sweep(batch).await {
                    Ok(n) => {
                        if n > 0 {
                            on_swept(n);
                        }
                        if n < u64::from(batch) {
                            break;
                        }
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

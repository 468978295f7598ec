//! Several requests' reservations or completions in one statement.
//!
//! One statement per request is one commit per request, and past a few
//! thousand a second the database spends its time on per-statement and
//! per-commit work rather than on rows. Here every operation is queued; a
//! few worker tasks each take what is waiting — up to `MAX_BATCH` — and run
//! it as one statement (`sql::RESERVE_MANY`, `sql::COMPLETE_MANY`): one round
//! trip and one commit for all of them.
//!
//! A worker never waits to fill a batch. When the database keeps up, every
//! operation finds an idle worker and runs at once, alone; batches form only
//! while every worker is busy, which is exactly when they help. So there are
//! far fewer workers than pooled connections (`workers_for`): few enough that
//! concurrent requests share statements. The pool serves the rest (replays
//! that reach Postgres, releases, the operator plane, the sweeper).
//!
//! What a batch cannot decide it hands back to its caller, which then runs the
//! single-row statement as it would alone: a key twice in one batch (one statement
//! may not touch a row twice), a snapshot that missed a concurrent commit, and
//! a batch that failed without losing its connection (one row the database
//! refused must fail only its own request).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};

/// Most operations one statement carries.
pub const MAX_BATCH: usize = 64;

/// Workers per queue for a pool of `pool_size` connections. Two: measured
/// on the bench (64 connections, pool of 32), one worker gave the largest
/// batches and the most new keys a second (12.5k), two a little less (10.7k),
/// eight 7.3k; two keep a second statement going while one waits on a lock.
pub fn workers_for(pool_size: usize) -> usize {
    pool_size.clamp(1, 2)
}

/// Operations waiting for a worker.
pub struct Queue<J> {
    jobs: mpsc::UnboundedSender<J>,
}

impl<J: Send + 'static> Queue<J> {
    /// Starts `workers` tasks that hand batches to `run`. `None` outside a
    /// Tokio runtime (a store built by synchronous code runs unbatched).
    pub fn start<F, Fut>(workers: usize, run: F) -> Option<Queue<J>>
    where
        F: Fn(Vec<J>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (jobs, waiting) = mpsc::unbounded_channel();
        let waiting = Arc::new(Mutex::new(waiting));
        let run = Arc::new(run);
        for _ in 0..workers.max(1) {
            let (waiting, run) = (waiting.clone(), run.clone());
            runtime.spawn(async move {
                // Ends when the store (the only sender) is dropped.
                while let Some(batch) = next_batch(&waiting).await {
                    run(batch).await;
                }
            });
        }
        Some(Queue { jobs })
    }

    /// `Err` gives the job back when the workers are gone.
    pub fn push(&self, job: J) -> Result<(), J> {
        self.jobs.send(job).map_err(|refused| refused.0)
    }
}

/// Waits for one job, then takes whatever else is already waiting. The lock
/// lets one idle worker wait at a time; the others are running statements.
async fn next_batch<J>(waiting: &Mutex<mpsc::UnboundedReceiver<J>>) -> Option<Vec<J>> {
    let mut waiting = waiting.lock().await;
    let first = waiting.recv().await?;
    let mut batch = Vec::with_capacity(8);
    batch.push(first);
    while batch.len() < MAX_BATCH {
        match waiting.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn jobs_queued_while_workers_are_busy_run_as_one_batch() {
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let (open_tx, open_rx) = oneshot::channel::<()>();
        let gate = Arc::new(Mutex::new(Some(open_rx)));
        let queue = Queue::start(1, move |batch: Vec<usize>| {
            let (seen, gate) = (seen.clone(), gate.clone());
            async move {
                // The first batch holds the only worker until the test opens it.
                if let Some(open) = gate.lock().await.take() {
                    let _ = open.await;
                }
                seen.lock().unwrap().push(batch);
            }
        })
        .expect("inside a runtime");
        queue.push(0).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for job in 1..=100 {
            queue.push(job).unwrap();
        }
        open_tx.send(()).unwrap();
        for _ in 0..100 {
            if sizes.lock().unwrap().iter().map(Vec::len).sum::<usize>() == 101 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let sizes: Vec<usize> = sizes.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![1, MAX_BATCH, 100 - MAX_BATCH]);
    }

    #[tokio::test]
    async fn an_idle_worker_takes_a_job_at_once() {
        let ran = Arc::new(AtomicUsize::new(0));
        let count = ran.clone();
        let queue = Queue::start(2, move |batch: Vec<()>| {
            let count = count.clone();
            async move {
                count.fetch_add(batch.len(), Ordering::SeqCst);
            }
        })
        .expect("inside a runtime");
        queue.push(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), async {
            while ran.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("ran without waiting for a batch to fill");
    }

    #[test]
    fn outside_a_runtime_there_is_no_queue() {
        assert!(Queue::start(1, |_: Vec<()>| async {}).is_none());
    }
}

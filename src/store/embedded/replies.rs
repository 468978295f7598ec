//! Answers leave the writer thread once per batch, not once per job.
//!
//! A reply sent from the writer thread wakes its waiting task from outside
//! the runtime, and tokio then wakes the runtime's thread with a system call
//! (an `eventfd` write) for every reply: about two per new key. Instead the
//! writer hands each finished batch to one task on the runtime, which sends
//! the replies from there, where waking a task is a push onto its queue.

use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

use super::cause::EmbeddedCause;
use super::txn::Job;

/// A committed (or failed) batch whose callers have not been told yet.
struct Finished {
    jobs: Vec<Box<dyn Job>>,
    error: Option<EmbeddedCause>,
}

impl Finished {
    fn deliver(self) {
        for job in self.jobs {
            job.finish(self.error.as_ref());
        }
    }
}

/// The writer thread's way back to the callers.
pub(super) struct Replies {
    batches: Option<mpsc::UnboundedSender<Finished>>,
    /// The first refusal that lasts until a restart, kept for
    /// `Store::stopped_for_good` (`/healthz`).
    stopped: Arc<OnceLock<EmbeddedCause>>,
}

impl Replies {
    /// Delivers through a task on the current runtime; outside one (a store
    /// opened by synchronous code), from the writer thread itself.
    pub(super) fn start() -> Replies {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Replies {
                batches: None,
                stopped: Arc::default(),
            };
        };
        let (batches, mut finished) = mpsc::unbounded_channel::<Finished>();
        // Ends when the writer thread (the only sender) ends.
        runtime.spawn(async move {
            while let Some(batch) = finished.recv().await {
                batch.deliver();
            }
        });
        Replies {
            batches: Some(batches),
            stopped: Arc::default(),
        }
    }

    /// What `send` keeps of a refusal that lasts until a restart.
    pub(super) fn stopped(&self) -> Arc<OnceLock<EmbeddedCause>> {
        self.stopped.clone()
    }

    pub(super) fn send(&self, jobs: Vec<Box<dyn Job>>, error: Option<EmbeddedCause>) {
        if let Some(error) = error.as_ref().filter(|e| e.lasts_until_restart()) {
            let _ = self.stopped.set(error.clone());
        }
        let finished = Finished { jobs, error };
        match &self.batches {
            // The runtime that ran the task has shut down: answer from here.
            Some(batches) => {
                if let Err(refused) = batches.send(finished) {
                    refused.0.deliver();
                }
            }
            None => finished.deliver(),
        }
    }
}

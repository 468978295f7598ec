//! The embedded, durable single-file store (SQLite), for one gateway process.
//!
//! **Threading.** SQLite calls block, so none run on the async workers: one
//! dedicated thread owns the connection and is fed jobs over a channel, each
//! with a oneshot reply. It drains everything queued and runs it in one write
//! transaction (group commit, see `writer`): a burst of reservations costs one
//! fsync. The batch's replies go back to the runtime together (`replies`).
//! The thread exits, closing the file, when the last handle drops.
//!
//! **Durability.** WAL journal with `synchronous = FULL`: a commit is fsynced
//! before any reply leaves the thread, so an answer the gateway reported as
//! stored survives a process crash *and* a power loss or kernel panic.
//! `NORMAL` would survive SIGKILL but may lose the last commits on power loss,
//! and a lost completion means a retried request runs a second time — the one
//! thing this store exists to prevent. Group commit amortises the extra fsync
//! across every concurrent request, which keeps FULL affordable.
//!
//! **Encoding.** Instants are unix milliseconds; headers use a compact
//! length-prefixed binary layout (see `codec`) so byte values round-trip
//! exactly. Fencing tokens come from one store-wide sequence, so a token is
//! never reused for a record id even after its row was released or purged.

pub(crate) mod codec;
mod ops;
mod replies;
mod schema;
mod tokens;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

pub use schema::SCHEMA_VERSION;
pub use writer::Clock;

use super::{Lease, RecordId, RecordInfo, Reservation, Store, StoreError, StoredResponse};
use replies::Replies;
use writer::{Job, Task, Txn};

/// A handle on the store; clones share one writer thread.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Option<Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store file and its parent directories.
    /// Refuses a file whose schema is newer than this binary's.
    pub fn open(path: &Path) -> Result<EmbeddedStore, StoreError> {
        Self::open_with_clock(path, Arc::new(SystemTime::now))
    }

    /// As `open`, with an injected clock (tests of expiry and retention).
    pub fn open_with_clock(path: &Path, clock: Clock) -> Result<EmbeddedStore, StoreError> {
        let conn = schema::open_connection(path)?;
        let (tx, rx) = mpsc::channel::<Box<dyn Job>>();
        let replies = Replies::start();
        let thread = std::thread::Builder::new()
            .name("idemgate-store".into())
            .spawn(move || writer::run(conn, rx, clock, replies))
            .map_err(|e| StoreError::Unavailable(format!("starting the store thread: {e}")))?;
        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                jobs: Some(tx),
                thread: Some(thread),
            }),
        })
    }

    async fn call<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (job, reply) = Task::job(work);
        let sent = (self.inner.jobs.as_ref()).is_some_and(|tx| tx.send(job).is_ok());
        if !sent {
            return Err(stopped());
        }
        reply.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the store thread has stopped".into())
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the thread once it has finished its batch;
        // joining makes the file closed (WAL checkpointed) when drop returns.
        self.jobs.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the store thread panicked");
        }
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    fn backend(&self) -> &'static str {
        "embedded"
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<SystemTime>), StoreError> {
        let (id, fingerprint) = (id.clone(), fingerprint.to_owned());
        let (reservation, expires_at) = self
            .call(move |txn| ops::reserve(txn, &id, &fingerprint, lease_for))
            .await?;
        Ok((reservation, expires_at.map(codec::from_ms)))
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<(), StoreError> {
        let (lease, response) = (lease.clone(), response.clone());
        self.call(move |txn| ops::complete(txn.conn, &lease, &response, retain_for, txn.now))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.call(move |txn| ops::release(txn.conn, &lease)).await
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        let (route, key) = (route.to_owned(), key.to_owned());
        self.call(move |txn| ops::records(txn.conn, &route, &key))
            .await
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        let (route, key) = (route.to_owned(), key.to_owned());
        self.call(move |txn| ops::purge(txn.conn, &route, &key))
            .await
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        self.call(move |txn| ops::sweep(txn.conn, batch, txn.now))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.call(|txn| ops::ping(txn.conn)).await
    }
}

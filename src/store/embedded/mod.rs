//! The embedded, durable single-file store (SQLite), for one gateway process.
//!
//! **Threading.** SQLite calls block, so none run on the async workers: one
//! dedicated thread owns the connection and is fed jobs over a channel, each
//! with a oneshot reply. It drains everything queued and runs it in one write
//! transaction (group commit, see `writer`): a burst of reservations costs one
//! fsync. The batch's replies go back to the runtime together (`replies`).
//! The thread exits, closing the file, when the last handle drops. The
//! count behind `idemgate_records` is the one read that does not go through
//! it: it runs beside it on a read-only connection of its own (`reader`,
//! `count`).
//!
//! **Durability** (`Durability::PowerLoss`, the default). WAL journal,
//! every batch's commit synced (`fdatasync`) before its answers leave the
//! thread, so an answer the gateway reported as stored survives a process
//! crash *and* a power loss or kernel panic: a lost completion would mean a
//! retried request runs a second time, the one thing this store exists to
//! prevent. Group commit amortises the sync across every concurrent request.
//! One exception, for speed: a new lease is answered once committed, before
//! that sync (`writer`), so its request is forwarded while the disk syncs.
//! Its lease then survives a process crash at once and a power loss one sync
//! later. Should the power fail within that sync, the key has no record
//! after the reboot and a retry runs the request again at once; with the
//! lease on disk it would have run again too, once the lease expired (a dead
//! holder's key is taken over).
//!
//! `Durability::ProcessCrash` (chosen by the operator): every answer leaves
//! once committed, in the OS page cache, which the gateway's own crash does
//! not lose, and a thread syncs the WAL behind the writer within
//! `background_sync::INTERVAL`. A power loss never corrupts the file; it can
//! lose the answers of that last interval, and a retry of those keys then
//! runs again.
//!
//! **Encoding.** Instants are unix milliseconds; headers use a compact
//! length-prefixed binary layout (see `codec`) so byte values round-trip
//! exactly. Fencing tokens come from one store-wide sequence, so a token is
//! never reused for a record id even after its row was released or purged.

mod background_sync;
mod cause;
mod clock;
pub(crate) mod codec;
mod compact;
mod compact_stop;
mod count;
mod db_error;
mod file_watch;
mod late_lease;
mod listing;
mod live_leases;
mod ops;
mod reader;
mod replies;
mod schema;
mod serve_lock;
mod statements;
mod tokens;
mod txn;
mod wal_sync;
mod writer;
mod writes_elsewhere;

use std::path::Path;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::oneshot;

pub use cause::{EmbeddedCause, FileChange, FileUse};
pub use clock::{Clock, WallClock};
pub use compact::{Compacted, Compaction};
pub use compact_stop::CompactStop;
pub use schema::{SCHEMA_VERSION, holds_a_database};
pub use writes_elsewhere::WrittenElsewhere;

use super::{
    Kept, Lease, MigrationReport, RecordId, RecordInfo, Reservation, Store, StoreError,
    StoredResponse,
};
use crate::config::Durability;
use background_sync::BackgroundSync;
use replies::Replies;
use txn::{Job, Task, Txn};
use writer::Syncing;

/// Pause before a completion that failed is tried again, doubled up to
/// `COMPLETE_RETRY_MAX`.
const COMPLETE_RETRY_FIRST: Duration = Duration::from_millis(50);
const COMPLETE_RETRY_MAX: Duration = Duration::from_millis(500);

/// A handle on the store; clones share one writer thread.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Option<Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
    /// The count runs on it, beside the writer (`reader`).
    reader: Arc<reader::Reader>,
    /// Held by `serve` (`open_for_serving`); released after the thread has
    /// closed the file.
    _serve_lock: Option<serve_lock::ServeLock>,
    /// Whether another process serves the file (opened by `keys` or
    /// `sweep` beside a gateway). This one then judges no in-flight
    /// record's lease dead by its time on file: the gateway's running
    /// requests may hold leases its wall clock has passed (`live_leases`).
    /// And its purges wait for the gateway to drop its copies (`purge`).
    served_elsewhere: bool,
    /// Told of commits another process made (`writes_elsewhere`).
    written_elsewhere: Arc<OnceLock<WrittenElsewhere>>,
    /// How long a reservation waits for the writer (`late_lease`).
    reserve_deadline: Duration,
    /// Reservations given up at that deadline and not yet answered: while
    /// any is, new ones are refused without being queued (`late_lease`).
    late: late_lease::Late,
    /// Set once the writer refuses everything until a restart (`replies`).
    stopped: Arc<OnceLock<EmbeddedCause>>,
}

/// For what opens the file without the serve lock (`keys`, `sweep`,
/// `migrate`): a file of an older schema that a gateway serves is served by
/// an older idemgate (a gateway of this version migrates the file before it
/// serves). Migrating it under that gateway would leave it running on a
/// schema it refuses at its next start, so the file is left alone.
fn refuse_migrating_under_a_gateway(path: &Path) -> Result<(), StoreError> {
    if !serve_lock::held_elsewhere(path) {
        return Ok(());
    }
    match schema::version_on_disk(path) {
        Some(found) if found > 0 && found < schema::SCHEMA_VERSION => {
            Err(cause::EmbeddedCause::ServedOlder {
                path: path.to_owned(),
                lock: serve_lock::lock_path(path),
                found,
                supported: schema::SCHEMA_VERSION,
            }
            .into())
        }
        _ => Ok(()),
    }
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store file and its parent directories,
    /// every answer synced before it is acknowledged. Refuses a file whose
    /// schema is newer than this binary's.
    pub fn open(path: &Path) -> Result<EmbeddedStore, StoreError> {
        Self::open_with(path, Durability::PowerLoss, Clock::system())
    }

    /// Brings the file's schema to `SCHEMA_VERSION` (creating the file if
    /// needed) and closes it; says the version the file had, 0 for a new
    /// file. `idemgate migrate`: it takes no serve lock, so it works beside a
    /// running gateway, whose opening did the same already; a file of an
    /// older schema that a gateway serves is an older gateway's, and is
    /// refused (`refuse_migrating_under_a_gateway`).
    pub fn migrate(path: &Path) -> Result<MigrationReport, StoreError> {
        refuse_migrating_under_a_gateway(path)?;
        schema::open_and_migrate(path).map(|(_, report)| report)
    }

    /// Rewrites the file without the space swept and purged records left
    /// (`idemgate compact`); refused while a gateway serves it. `stop`
    /// stops it midway, the file left as it was.
    pub fn compact(path: &Path, stop: &CompactStop) -> Result<Compaction, StoreError> {
        compact::compact(path, stop)
    }

    /// `Store::count` within other limits than the default ones (a test of
    /// the estimate on a small file, or an operator's own trade-off).
    pub async fn count_within(
        &self,
        limits: super::CountLimits,
    ) -> Result<Vec<super::Count>, StoreError> {
        self.inner.reader.count(limits).await
    }

    /// As `open`, with an injected wall clock as the only time (tests of
    /// expiry and retention: `Clock::manual`).
    pub fn open_with_clock(path: &Path, clock: WallClock) -> Result<EmbeddedStore, StoreError> {
        Self::open_with(path, Durability::PowerLoss, Clock::manual(clock))
    }

    /// As `open`, with the chosen durability and clock.
    pub fn open_with(
        path: &Path,
        durability: Durability,
        clock: Clock,
    ) -> Result<EmbeddedStore, StoreError> {
        Self::open_reporting(path, durability, clock).map(|(store, _)| store)
    }

    /// As `open_with`, also saying what it found of the schema and did.
    pub fn open_reporting(
        path: &Path,
        durability: Durability,
        clock: Clock,
    ) -> Result<(EmbeddedStore, MigrationReport), StoreError> {
        Self::open_locked(path, durability, clock, None)
    }

    /// As `open_with`, for `serve`: first takes the lock that refuses a
    /// second gateway on the same file (`serve_lock`), held while the store
    /// lives. `keys` and `sweep` open the file without it (and leave alone a
    /// file an older gateway serves, as `migrate` does). Also says what it
    /// found of the schema and did (`serve` logs it).
    pub fn open_for_serving(
        path: &Path,
        durability: Durability,
        clock: Clock,
    ) -> Result<(EmbeddedStore, MigrationReport), StoreError> {
        let lock = serve_lock::acquire(path)?;
        Self::open_locked(path, durability, clock, Some(lock))
    }

    fn open_locked(
        path: &Path,
        durability: Durability,
        clock: Clock,
        lock: Option<serve_lock::ServeLock>,
    ) -> Result<(EmbeddedStore, MigrationReport), StoreError> {
        if lock.is_none() {
            refuse_migrating_under_a_gateway(path)?;
        }
        let (conn, report) = schema::open_and_migrate(path)?;
        let file = file_watch::FileWatch::new(path);
        let sync_wal = wal_sync::sync_wal(path)?;
        let syncing = match durability {
            Durability::PowerLoss => Syncing::BeforeAnswers(sync_wal),
            Durability::ProcessCrash => {
                Syncing::Behind(BackgroundSync::start(sync_wal, background_sync::INTERVAL)?)
            }
        };
        Self::start(conn, clock, syncing, file, lock).map(|store| (store, report))
    }

    fn start(
        conn: rusqlite::Connection,
        clock: Clock,
        syncing: Syncing,
        file: Option<file_watch::FileWatch>,
        lock: Option<serve_lock::ServeLock>,
    ) -> Result<EmbeddedStore, StoreError> {
        let path = conn
            .path()
            .map(std::path::PathBuf::from)
            .unwrap_or_default();
        let reader = Arc::new(reader::Reader::open(&path, clock.clone())?);
        let (tx, rx) = mpsc::channel::<Box<dyn Job>>();
        let replies = Replies::start();
        let stopped = replies.stopped();
        let written_elsewhere = Arc::new(OnceLock::new());
        let watch = writes_elsewhere::Watch::new(written_elsewhere.clone());
        let thread = std::thread::Builder::new()
            .name("idemgate-store".into())
            .spawn(move || writer::run(conn, rx, clock, replies, syncing, file, watch))
            .map_err(|e| EmbeddedCause::thread("store", e))?;
        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                jobs: Some(tx),
                thread: Some(thread),
                reader,
                served_elsewhere: lock.is_none() && serve_lock::held_elsewhere(&path),
                written_elsewhere,
                reserve_deadline: late_lease::DEADLINE,
                late: late_lease::Late::default(),
                stopped,
                _serve_lock: lock,
            }),
        })
    }

    /// Calls `hook` whenever another process has committed to the file
    /// (`idemgate keys purge` beside this gateway), within
    /// `writes_elsewhere::IDLE_CHECK`; the first hook set is the one called.
    pub fn on_written_elsewhere(&self, hook: WrittenElsewhere) {
        let _ = self.inner.written_elsewhere.set(hook);
    }

    /// Runs `work` on the writer thread; answered once its batch is synced.
    async fn call<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Txn<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    {
        self.send(Task::job(work)).await
    }

    async fn send<T>(
        &self,
        (job, reply): (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>),
    ) -> Result<T, StoreError> {
        self.queue(job)?;
        reply.await.map_err(|_| stopped())?
    }

    /// Hands `job` to the writer thread.
    fn queue(&self, job: Box<dyn Job>) -> Result<(), StoreError> {
        let sent = (self.inner.jobs.as_ref()).is_some_and(|tx| tx.send(job).is_ok());
        if sent { Ok(()) } else { Err(stopped()) }
    }
}

fn stopped() -> StoreError {
    EmbeddedCause::Stopped.into()
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the channel ends the thread once it has finished its batch;
        // joining makes the file closed (WAL checkpointed) when drop returns,
        // the reader's connection closed first.
        self.reader.close();
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
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        if self.inner.late.any() {
            return Err(EmbeddedCause::Behind(self.inner.reserve_deadline).into());
        }
        let (id, fingerprint) = (id.clone(), fingerprint.to_owned());
        // A new lease is answered before its batch's sync (`writer`).
        let (job, reply) = Task::job_answered_before_sync(
            move |txn| ops::reserve(txn, &id, &fingerprint, lease_for),
            |(reservation, _)| matches!(reservation, Reservation::Reserved(_)),
        );
        self.queue(job)?;
        late_lease::within(self, self.inner.reserve_deadline, reply).await
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        // The request has run: an answer not recorded leaves its key to a
        // takeover once the lease ends, which would run it again. So a
        // failure that may pass (a full disk, another process's lock) is
        // tried again while the lease holds, as the Postgres store does
        // (docs/guarantees.md, "With the embedded store").
        let mut retry = super::LeaseRetry::new(COMPLETE_RETRY_FIRST, COMPLETE_RETRY_MAX);
        loop {
            let (held, kept) = (lease.clone(), response.clone());
            let written = self
                .call(move |txn| ops::complete(txn, &held, &kept, retain_for))
                .await;
            let passing = matches!(&written,
                Err(StoreError::Unavailable(super::Unavailable::Embedded(cause))) if cause.may_pass());
            match retry.pause_within(lease) {
                Some(pause) if passing => retry.sleep(pause).await,
                _ => return written,
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.call(move |txn| ops::release(txn, &lease)).await
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        let (route, key) = (route.to_owned(), key.to_owned());
        self.call(move |txn| ops::records(txn, &route, &key)).await
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        let (route, key) = (route.to_owned(), key.to_owned());
        let purged = self.call(move |txn| ops::purge(txn, &route, &key)).await?;
        // The gateway serving the file drops its copies of replayed answers
        // once it sees the commit: the retry that follows must not find one.
        if purged > 0 && self.inner.served_elsewhere {
            tokio::time::sleep(writes_elsewhere::SETTLE).await;
        }
        Ok(purged)
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        let dead_leases = !self.inner.served_elsewhere;
        self.call(move |txn| ops::sweep(txn, batch, dead_leases))
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.call(ops::ping).await
    }

    fn stopped_for_good(&self) -> Option<StoreError> {
        self.inner.stopped.get().map(|cause| cause.clone().into())
    }

    async fn list(&self, query: &super::ListQuery) -> Result<super::Page, StoreError> {
        let query = query.clone();
        self.call(move |txn| listing::list(txn, &query)).await
    }

    async fn count(&self) -> Result<Vec<super::Count>, StoreError> {
        self.inner.reader.count(super::CountLimits::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Unavailable;

    /// The embedded cause of a store error, if it is one.
    fn cause(error: &StoreError) -> Option<&EmbeddedCause> {
        match error {
            StoreError::Unavailable(Unavailable::Embedded(cause)) => Some(cause),
            _ => None,
        }
    }

    /// A fresh directory for one test, removed when the test ends, passed or not.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("idemgate-embedded-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            TempDir(dir)
        }

        fn file(&self) -> std::path::PathBuf {
            self.0.join("store.db")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[tokio::test]
    async fn a_new_lease_is_answered_before_the_sync_and_a_failed_sync_stops_the_store() {
        let dir = TempDir::new("sync");
        let conn = schema::open_connection(&dir.file()).unwrap();
        let failing: wal_sync::SyncWal = Box::new(|| Err(std::io::Error::other("disk gone")));
        let store = EmbeddedStore::start(
            conn,
            Clock::system(),
            Syncing::BeforeAnswers(failing),
            None,
            None,
        )
        .unwrap();
        let id = RecordId::new("charges", "", "k1");
        let lease_for = Duration::from_secs(60);
        assert!(store.stopped_for_good().is_none());

        // Answered between the commit and the (failing) sync.
        let Reservation::Reserved(lease) = store.reserve(&id, "fp", lease_for).await.unwrap()
        else {
            panic!("a new key is reserved");
        };
        let completed = store.complete(&lease, &answer(), lease_for).await;
        assert!(
            matches!(completed.as_ref().err().and_then(cause),
                Some(EmbeddedCause::SyncFailed(e)) if e.to_string() == "disk gone"),
            "{completed:?}"
        );
        let later = store
            .reserve(&RecordId::new("charges", "", "k2"), "fp", lease_for)
            .await;
        assert!(
            matches!(later, Err(StoreError::Unavailable(_))),
            "{later:?}"
        );
        assert!(
            store.ping().await.is_err(),
            "/readyz reports the store unready"
        );
        assert!(
            matches!(
                store.stopped_for_good().as_ref().and_then(cause),
                Some(EmbeddedCause::SyncFailed(_))
            ),
            "/healthz reports that only a restart mends it"
        );
    }

    /// The serving store is told of a commit another process made to its
    /// file (`idemgate keys purge` beside it) within a few idle checks, and
    /// of none of its own: its writes, its reader's counts, its checkpoints
    /// (each drop of every copy would cost reads of the store). The purging
    /// side waits for the gateway to have looked before it returns.
    #[tokio::test]
    async fn a_commit_made_elsewhere_is_told_and_none_of_its_own() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let dir = TempDir::new("elsewhere");
        for durability in [Durability::PowerLoss, Durability::ProcessCrash] {
            let _ = std::fs::remove_dir_all(&dir.0);
            let (store, _) =
                EmbeddedStore::open_for_serving(&dir.file(), durability, Clock::system()).unwrap();
            let told = Arc::new(AtomicU64::new(0));
            let counted = told.clone();
            store.on_written_elsewhere(Box::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
            }));
            let lease_for = Duration::from_secs(60);
            // Enough writes for SQLite's own checkpoints (every 1,000 pages).
            for i in 0..3_000 {
                let id = RecordId::new("charges", "", format!("k{i}").as_str());
                let Reservation::Reserved(lease) =
                    store.reserve(&id, "fp", lease_for).await.unwrap()
                else {
                    panic!("a new key is reserved");
                };
                store.complete(&lease, &answer(), lease_for).await.unwrap();
                if i % 500 == 0 {
                    store.count().await.unwrap();
                    tokio::time::sleep(writes_elsewhere::IDLE_CHECK * 3).await;
                }
            }
            tokio::time::sleep(writes_elsewhere::IDLE_CHECK * 5).await;
            assert_eq!(told.load(Ordering::SeqCst), 0, "{durability:?}");

            // Opening the file beside writes nothing (its schema is this
            // version's), nor does reading it: nothing told.
            let beside = EmbeddedStore::open(&dir.file()).unwrap();
            assert!(beside.inner.served_elsewhere);
            assert_eq!(beside.records("charges", "k2").await.unwrap().len(), 1);
            tokio::time::sleep(writes_elsewhere::IDLE_CHECK * 5).await;
            assert_eq!(told.load(Ordering::SeqCst), 0, "{durability:?}");
            let started = std::time::Instant::now();
            assert_eq!(beside.purge("charges", "k1").await.unwrap(), 1);
            assert!(started.elapsed() >= writes_elsewhere::SETTLE);
            assert_eq!(told.load(Ordering::SeqCst), 1, "{durability:?}");
            // Nothing purged, nothing to wait for.
            let started = std::time::Instant::now();
            assert_eq!(beside.purge("charges", "k1").await.unwrap(), 0);
            assert!(started.elapsed() < writes_elsewhere::SETTLE);
        }
    }

    /// A wall clock stepped forward past a running request's lease (an NTP
    /// correction, a VM resumed): the request still runs in this process,
    /// so a retry waits for it (or gets 422 with another body) rather than
    /// running it again, the sweeper leaves its record, and its answer is
    /// stored and replayed. A lease whose holder never comes back still
    /// ends, by the monotonic clock.
    #[tokio::test]
    async fn a_wall_clock_step_does_not_end_a_lease_this_process_holds() {
        let dir = TempDir::new("clock-step");
        let step = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let wall = {
            let step = step.clone();
            move || {
                let secs = step.load(std::sync::atomic::Ordering::SeqCst);
                SystemTime::now() + Duration::from_secs(secs)
            }
        };
        let store = EmbeddedStore::open_with(
            &dir.file(),
            Durability::PowerLoss,
            Clock::stepping(Arc::new(wall)),
        )
        .unwrap();
        let (running, abandoned) = (
            RecordId::new("charges", "", "running"),
            RecordId::new("charges", "", "abandoned"),
        );
        let lease_for = Duration::from_secs(30);
        let Reservation::Reserved(lease) = store.reserve(&running, "fp", lease_for).await.unwrap()
        else {
            panic!("a new key is reserved");
        };
        let short = Duration::from_millis(300);
        let Reservation::Reserved(_) = store.reserve(&abandoned, "fp", short).await.unwrap() else {
            panic!("a new key is reserved");
        };

        step.store(3600, std::sync::atomic::Ordering::SeqCst);
        let retry = store.reserve(&running, "fp", lease_for).await.unwrap();
        assert!(
            matches!(retry, Reservation::InFlight { lease_expires_at }
                if lease_expires_at > SystemTime::now() + Duration::from_secs(3600)),
            "{retry:?}"
        );
        let other = store.reserve(&running, "other", lease_for).await.unwrap();
        assert!(matches!(other, Reservation::Mismatch), "{other:?}");
        assert_eq!(store.sweep(100).await.unwrap(), 0, "both leases are live");
        let again = store.reserve(&abandoned, "fp", short).await.unwrap();
        assert!(matches!(again, Reservation::InFlight { .. }), "{again:?}");

        store.complete(&lease, &answer(), lease_for).await.unwrap();
        let replay = store.reserve(&running, "fp", lease_for).await.unwrap();
        assert!(
            matches!(&replay, Reservation::Completed(r) if r.status == answer().status),
            "{replay:?}"
        );
        // The abandoned lease ends 300 ms after it was taken, by the
        // monotonic clock: the sweeper deletes it, a retry takes it over.
        tokio::time::sleep(short).await;
        assert_eq!(store.sweep(100).await.unwrap(), 1);
        let taken = store.reserve(&abandoned, "fp", short).await.unwrap();
        assert!(matches!(taken, Reservation::Reserved(_)), "{taken:?}");
    }

    /// A store whose reservations wait `deadline` for the writer, and the
    /// writer held up for `stall` (a disk hung or frozen: a write or a sync
    /// blocked in the kernel) from a moment after this returns.
    async fn stalled_store(
        dir: &TempDir,
        deadline: Duration,
        stall: Duration,
    ) -> (
        EmbeddedStore,
        tokio::task::JoinHandle<Result<(), StoreError>>,
    ) {
        let mut store = EmbeddedStore::open(&dir.file()).unwrap();
        Arc::get_mut(&mut store.inner).unwrap().reserve_deadline = deadline;
        let stalled = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .call(move |_| {
                        std::thread::sleep(stall);
                        Ok(())
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        (store, stalled)
    }

    /// Waits (at most 5 s) until `id` is reserved anew: nothing holds it.
    async fn reserved_soon(store: &EmbeddedStore, id: &RecordId, lease_for: Duration) {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let again = store.reserve(id, "fp", lease_for).await;
            if matches!(again, Ok(Reservation::Reserved(_))) {
                return;
            }
            assert!(
                std::time::Instant::now() < until,
                "the key stayed held: {again:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A writer thread that does not answer (its disk hung or frozen: a
    /// write or a sync blocked in the kernel) no longer holds a reservation
    /// without end: past its deadline it is refused (503), and the lease it
    /// commits once the disk answers is released, so a retry runs at once
    /// rather than getting 409 for the lease's length.
    #[tokio::test]
    async fn a_reservation_the_writer_does_not_answer_in_time_is_refused_and_freed() {
        let dir = TempDir::new("writer-stalled");
        let (deadline, stall) = (Duration::from_millis(300), Duration::from_millis(1500));
        let (store, stalled) = stalled_store(&dir, deadline, stall).await;
        let id = RecordId::new("charges", "", "k");
        let lease_for = Duration::from_secs(60);
        let started = std::time::Instant::now();
        let refused = store.reserve(&id, "fp", lease_for).await;
        assert!(
            matches!(refused.as_ref().err().and_then(cause), Some(EmbeddedCause::NoAnswer(d)) if *d == deadline),
            "{refused:?}"
        );
        assert!(started.elapsed() < stall, "waited for the writer");
        stalled.await.unwrap().unwrap();
        // The lease committed after the deadline is released behind it.
        reserved_soon(&store, &id, lease_for).await;
    }

    /// Once a reservation has waited out its deadline, the writer is known
    /// to be held up: each new one would queue behind it (its job and the
    /// task that frees its lease kept in memory for as long as the disk
    /// hangs, which is without bound) only to be refused at the deadline.
    /// It is refused at once instead, and nothing is queued for it.
    #[tokio::test]
    async fn while_a_reservation_waits_past_its_deadline_new_ones_are_refused_at_once() {
        let dir = TempDir::new("writer-behind");
        let (deadline, stall) = (Duration::from_millis(300), Duration::from_millis(2000));
        let (store, stalled) = stalled_store(&dir, deadline, stall).await;
        let lease_for = Duration::from_secs(60);
        let first = store
            .reserve(&RecordId::new("charges", "", "k"), "fp", lease_for)
            .await;
        assert!(
            matches!(
                first.as_ref().err().and_then(cause),
                Some(EmbeddedCause::NoAnswer(_))
            ),
            "{first:?}"
        );
        let started = std::time::Instant::now();
        for n in 0..1_000 {
            let id = RecordId::new("charges", "", format!("other-{n}").as_str());
            let refused = store.reserve(&id, "fp", lease_for).await;
            assert!(
                matches!(refused.as_ref().err().and_then(cause), Some(EmbeddedCause::Behind(d)) if *d == deadline),
                "{refused:?}"
            );
        }
        assert!(
            started.elapsed() < deadline,
            "refused without waiting: {:?}",
            started.elapsed()
        );
        stalled.await.unwrap().unwrap();
        // Once the writer has answered the late one, reservations are taken
        // again; none of those refused holds its key.
        reserved_soon(&store, &RecordId::new("charges", "", "other-7"), lease_for).await;
    }

    /// `rm` of the file under a running gateway: SQLite would go on writing
    /// to the unlinked inode, and the next start would find none of it.
    /// Within `file_watch::INTERVAL` the store refuses every operation and
    /// `/readyz` reports it; a file put back at the path does not undo that.
    #[tokio::test]
    async fn a_store_file_deleted_under_the_store_stops_it() {
        let dir = TempDir::new("deleted");
        let store = EmbeddedStore::open(&dir.file()).unwrap();
        let lease_for = Duration::from_secs(60);
        let first = store
            .reserve(&RecordId::new("charges", "", "k1"), "fp", lease_for)
            .await;
        assert!(matches!(first, Ok(Reservation::Reserved(_))), "{first:?}");
        std::fs::remove_file(dir.file()).unwrap();
        // Another file at the path is still not the one the store has open.
        std::fs::write(dir.file(), b"").unwrap();
        tokio::time::sleep(file_watch::INTERVAL + Duration::from_millis(100)).await;

        let later = store
            .reserve(&RecordId::new("charges", "", "k2"), "fp", lease_for)
            .await;
        assert!(
            matches!(later.as_ref().err().and_then(cause),
                Some(EmbeddedCause::FileGone { path, change: FileChange::Replaced })
                    if *path == dir.file()),
            "{later:?}"
        );
        assert!(store.ping().await.is_err(), "/readyz reports it");
        drop(store);
    }

    /// The WAL alone deleted: it holds every commit not yet checkpointed,
    /// which a crash would then lose.
    #[tokio::test]
    async fn a_wal_deleted_under_the_store_stops_it() {
        let dir = TempDir::new("wal-deleted");
        let store = EmbeddedStore::open(&dir.file()).unwrap();
        std::fs::remove_file(schema::wal_path(&dir.file())).unwrap();
        tokio::time::sleep(file_watch::INTERVAL + Duration::from_millis(100)).await;
        let later = store
            .reserve(
                &RecordId::new("charges", "", "k1"),
                "fp",
                Duration::from_secs(60),
            )
            .await;
        assert!(
            matches!(&later, Err(e) if e.to_string().contains("store.db-wal was deleted")),
            "{later:?}"
        );
        drop(store);
    }

    fn answer() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: StoredResponse::header_list([("location", b"/v1/charges/1".as_slice())]),
            body: bytes::Bytes::from_static(b"{}"),
            body_omitted: false,
            outcome_unknown: false,
        }
    }

    /// A store on a fresh file in `dir`, syncing behind the writer with `sync`.
    fn synced_behind(dir: &TempDir, sync: wal_sync::SyncWal) -> EmbeddedStore {
        let conn = schema::open_connection(&dir.file()).unwrap();
        let background = BackgroundSync::start(sync, Duration::from_millis(5)).unwrap();
        EmbeddedStore::start(
            conn,
            Clock::system(),
            Syncing::Behind(background),
            None,
            None,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn process_crash_durability_answers_at_the_commit_and_syncs_behind_it() {
        let dir = TempDir::new("behind");
        // The sync blocks until the test lets it through.
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let synced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sync: wal_sync::SyncWal = Box::new({
            let synced = synced.clone();
            move || {
                let _ = gate.recv();
                synced.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
        });
        let store = synced_behind(&dir, sync);
        // Declared after the store, so dropped before it: a failing
        // assertion then frees the held sync instead of hanging the drop.
        let release = release;
        let id = RecordId::new("charges", "", "k1");
        let lease_for = Duration::from_secs(60);

        // Both answered while the sync of the first is still held up (a
        // store that waited for it would hit the timeout, not hang).
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            let Reservation::Reserved(lease) = store.reserve(&id, "fp", lease_for).await? else {
                panic!("a new key is reserved");
            };
            store.complete(&lease, &answer(), lease_for).await
        })
        .await;
        assert!(
            matches!(answered, Ok(Ok(_))),
            "answered before the sync: {answered:?}"
        );
        assert_eq!(synced.load(std::sync::atomic::Ordering::SeqCst), 0);

        release.send(()).unwrap();
        for _ in 0..200 {
            if synced.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            synced.load(std::sync::atomic::Ordering::SeqCst) > 0,
            "the WAL was synced behind"
        );
        drop(release);
        drop(store);

        let reopened = EmbeddedStore::open(&dir.file()).unwrap();
        let again = reopened.reserve(&id, "fp", lease_for).await.unwrap();
        assert!(
            matches!(&again, Reservation::Completed(stored) if stored.status == 201),
            "{again:?}"
        );
        drop(reopened);
    }

    #[tokio::test]
    async fn a_failed_background_sync_stops_the_store() {
        let dir = TempDir::new("behind-fails");
        let failing: wal_sync::SyncWal = Box::new(|| Err(std::io::Error::other("disk gone")));
        let store = synced_behind(&dir, failing);
        let lease_for = Duration::from_secs(60);
        let first = store
            .reserve(&RecordId::new("charges", "", "k1"), "fp", lease_for)
            .await;
        assert!(
            matches!(first, Ok(Reservation::Reserved(_))),
            "answered at its commit: {first:?}"
        );
        let mut refused = None;
        for n in 0..200 {
            let later = store
                .reserve(
                    &RecordId::new("charges", "", format!("k{}", n + 2).as_str()),
                    "fp",
                    lease_for,
                )
                .await;
            if let Err(error @ StoreError::Unavailable(_)) = later {
                refused = Some(error.to_string());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refused = refused.expect("the store refuses operations after a failed sync");
        assert!(refused.contains("disk gone"), "{refused}");
        assert!(
            store.ping().await.is_err(),
            "/readyz reports the store unready"
        );
        assert!(store.stopped_for_good().is_some(), "/healthz says so too");
        drop(store);
    }
}

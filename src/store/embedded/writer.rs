//! The one thread that owns the SQLite connection, with group commit: it takes
//! every queued job, runs them all in one write transaction and commits once,
//! so N concurrent reservations cost one fsync instead of N.
//!
//! **Commit, then sync.** SQLite commits without syncing (`synchronous =
//! NORMAL`: the commit is in the WAL, in the OS page cache, which a crash
//! of this process does not lose) and this thread then syncs the WAL itself,
//! once per batch that wrote. Between the two it answers the batch's new
//! leases, so their requests go upstream while the disk syncs; every other
//! answer (a stored completion above all) waits for the sync, as it would
//! under `FULL`. A new lease only risks a power loss within that one sync,
//! and a lease lost that way costs what a dead holder's lease costs anyway:
//! a retry runs the request again (module doc of `embedded`). A sync that
//! fails leaves the file's state on disk unknown, so that batch's waiting
//! answers and every later job are refused (503) until a restart, as they
//! are once the file is found deleted or replaced (`file_watch`). With
//! `Durability::ProcessCrash` every answer leaves at the commit and
//! `background_sync` syncs behind this thread (`Syncing::Behind`).
//!
//! **One write per job.** Every job makes at most one writing statement
//! (`ops`: a reservation is one `INSERT`, or one `UPDATE` of a row it took
//! over; a completion one `UPDATE`), and SQLite undoes a failed statement's
//! own changes. So a failing job leaves nothing behind in the shared
//! transaction without a savepoint of its own (which would cost two more
//! statements per job). A job that failed *after* writing would break that: the batch
//! then fails as a whole rather than commit its partial writes.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, UNIX_EPOCH};

use rusqlite::Connection;

use super::background_sync::BackgroundSync;
use super::cause::EmbeddedCause;
use super::clock::Clock;
use super::codec::to_ms;
use super::file_watch::FileWatch;
use super::live_leases::LiveLeases;
use super::replies::Replies;
use super::statements::Statements;
use super::tokens::Tokens;
use super::txn::{Job, Txn};
use super::wal_sync::{SyncWal, sync_failed};
use super::writes_elsewhere::Watch;

/// Bounds one transaction so a flood cannot hold the write lock (and delay the
/// first replies) indefinitely.
const MAX_BATCH: usize = 512;

/// When a batch's commit reaches the disk (`Durability`).
pub(super) enum Syncing {
    /// Before its answers leave, except a new lease's (module doc).
    BeforeAnswers(SyncWal),
    /// Soon after; its answers leave at the commit.
    Behind(BackgroundSync),
}

/// The writer thread's body; returns (closing the connection) once every
/// sender is dropped. `file`, when given, is checked to still be the file
/// at its path (`file_watch`); `elsewhere` is told of commits another
/// process made (`writes_elsewhere`).
pub(super) fn run(
    conn: Connection,
    jobs: Receiver<Box<dyn Job>>,
    clock: Clock,
    replies: Replies,
    mut syncing: Syncing,
    mut file: Option<FileWatch>,
    mut elsewhere: Watch,
) {
    // Set by a failed sync, or the file gone, for good (module doc).
    let mut broken: Option<EmbeddedCause> = None;
    // The last failed batch's error while batches keep failing: a full disk
    // fails every batch that writes, and is logged once, not per batch.
    let mut failing: Option<String> = None;
    let mut statements = Statements::new(&conn);
    let mut live = LiveLeases::default();
    loop {
        let first = match elsewhere.idle_wait() {
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
            Some(wait) => match jobs.recv_timeout(wait) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    // A failure here is the next batch's to meet and say.
                    if broken.is_none() {
                        let _ = elsewhere.look(&mut statements);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
        };
        if let Syncing::Behind(background) = &syncing {
            // Nothing makes this thread wait between batches here, so on a
            // busy core it would commit each job alone. Yielding lets the
            // runtime queue what it has first; an idle core returns at once.
            std::thread::yield_now();
            broken = broken.or_else(|| background.failure());
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        if broken.is_none() {
            broken = file.as_mut().and_then(FileWatch::gone);
        }
        if let Some(err) = &broken {
            replies.send(batch, Some(err.clone()));
            continue;
        }
        let changes_before = conn.total_changes();
        let run = execute(
            &conn,
            &mut statements,
            &mut live,
            &mut elsewhere,
            &mut batch,
            &clock,
        );
        if let Err(e) = run {
            live.discard();
            let err = EmbeddedCause::Sqlite(Arc::new(e));
            let text = err.to_string();
            if failing.as_ref() != Some(&text) {
                tracing::error!(error = %text, jobs = batch.len(), "store transaction failed; \
                    until one commits, the same failure is not logged again");
                failing = Some(text);
            }
            replies.send(batch, Some(err));
            continue;
        }
        // A batch that only read has nothing to sync, and says nothing of
        // whether writes fail.
        if conn.total_changes() == changes_before {
            replies.send(batch, None);
            continue;
        }
        if failing.take().is_some() {
            tracing::info!("store transactions commit again");
        }
        let sync_wal = match &mut syncing {
            Syncing::BeforeAnswers(sync_wal) => sync_wal,
            Syncing::Behind(background) => {
                background.committed();
                replies.send(batch, None);
                continue;
            }
        };
        let (leases, rest): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|job| job.answered_before_sync());
        if !leases.is_empty() {
            replies.send(leases, None);
        }
        let error = sync_wal().err().map(|e| {
            let err = sync_failed(e);
            broken = Some(err.clone());
            err
        });
        if !rest.is_empty() {
            replies.send(rest, error);
        }
    }
}

fn execute<'c>(
    conn: &'c Connection,
    statements: &mut Statements<'c>,
    live: &mut LiveLeases,
    elsewhere: &mut Watch,
    batch: &mut [Box<dyn Job>],
    clock: &Clock,
) -> Result<(), rusqlite::Error> {
    let mut tx = Batch::begin(conn, statements)?;
    elsewhere.look(tx.statements())?;
    let mut tokens = Tokens::default();
    for job in batch.iter_mut() {
        let written_before = conn.total_changes();
        let now = moment(clock);
        let mut txn = Txn::new(now, live, &mut tokens, tx.statements());
        if job.run(&mut txn) {
            continue;
        }
        // Some errors (I/O, full disk) make SQLite roll the whole
        // transaction back; later statements would then autocommit one by
        // one, so stop and fail the batch instead.
        if conn.is_autocommit() {
            return Err(abort("transaction rolled back by sqlite"));
        }
        if conn.total_changes() != written_before {
            return Err(abort("a failed operation had written; batch rolled back"));
        }
    }
    tokens.save(tx.statements())?;
    tx.commit()?;
    live.commit(Instant::now());
    Ok(())
}

/// Now, in the whole milliseconds the file keeps, and the monotonic
/// instant of that same millisecond: a lease held here (`live_leases`) then
/// ends when its end on file says, not up to a millisecond after it.
fn moment(clock: &Clock) -> (i64, Option<Instant>) {
    let wall = clock.now();
    let past_ms = wall
        .duration_since(UNIX_EPOCH)
        .map_or(Duration::ZERO, |since| {
            Duration::from_nanos(u64::from(since.subsec_nanos() % 1_000_000))
        });
    let steady = clock
        .steady_now()
        .map(|steady| steady.checked_sub(past_ms).unwrap_or(steady));
    (to_ms(wall), steady)
}

/// The batch's write transaction. `BEGIN IMMEDIATE` and `COMMIT` run as
/// prepared statements (rusqlite's `Transaction` parses them as SQL text for
/// every batch); dropped uncommitted, it rolls back.
struct Batch<'s, 'c> {
    conn: &'c Connection,
    statements: &'s mut Statements<'c>,
    open: bool,
}

impl<'s, 'c> Batch<'s, 'c> {
    fn begin(
        conn: &'c Connection,
        statements: &'s mut Statements<'c>,
    ) -> Result<Batch<'s, 'c>, rusqlite::Error> {
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout
        // for another process) so no statement inside fails with SQLITE_BUSY.
        statements.get("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Batch {
            conn,
            statements,
            open: true,
        })
    }

    /// The writer's statements, for the batch's jobs.
    fn statements(&mut self) -> &mut Statements<'c> {
        self.statements
    }

    fn commit(mut self) -> Result<(), rusqlite::Error> {
        self.statements.get("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Batch<'_, '_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let rolled_back =
                (self.statements.get("ROLLBACK")).and_then(|mut stmt| stmt.execute([]));
            if let Err(err) = rolled_back {
                tracing::error!(error = %err, "rolling back a store batch failed");
            }
        }
    }
}

fn abort(message: &str) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some(message.into()),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::oneshot;

    use super::*;
    use crate::store::StoreError;
    use crate::store::embedded::db_error::db as unavailable;
    use crate::store::embedded::txn::Task;

    fn insert(v: i64) -> impl FnOnce(&mut Txn<'_, '_>) -> Result<i64, StoreError> + Send {
        move |txn| {
            txn.statement("INSERT INTO t (v) VALUES (?1)")?
                .execute([v])
                .map_err(unavailable)?;
            Ok(v)
        }
    }

    /// `count`, inside the batch's transaction.
    fn count_in(txn: &mut Txn<'_, '_>) -> Result<i64, StoreError> {
        txn.statement("SELECT count(*) FROM t")?
            .query_row([], |r| r.get(0))
            .map_err(unavailable)
    }

    fn count(conn: &Connection) -> Result<i64, StoreError> {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .map_err(unavailable)
    }

    /// Removes a test's directory when the test ends, passed or not.
    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh file with table `t`, whose CHECK refuses v >= 100.
    fn open(name: &str) -> (TempDir, std::path::PathBuf, Connection) {
        let dir =
            std::env::temp_dir().join(format!("idemgate-writer-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER CHECK (v < 100))")
            .unwrap();
        (TempDir(dir), path, conn)
    }

    #[test]
    fn queued_jobs_share_one_transaction_and_a_failing_statement_only_undoes_itself() {
        let (_dir, path, conn) = open("batch.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let mut replies = Vec::new();
        for v in 0..10 {
            let (job, reply) = Task::job(insert(v));
            tx.send(job).unwrap();
            replies.push(reply);
        }
        // Refused by the CHECK: SQLite undoes that statement alone.
        let (job, refused) = Task::job(insert(100));
        tx.send(job).unwrap();
        // Inside the batch: this connection sees 10 rows, another sees none
        // (nothing committed yet), so the batch is one transaction.
        let observer = path.clone();
        let (job, seen) = Task::job(move |txn: &mut Txn<'_, '_>| {
            let other = Connection::open(&observer).map_err(unavailable)?;
            Ok((count_in(txn)?, count(&other)?))
        });
        tx.send(job).unwrap();
        drop(tx);

        run_writer(conn, rx, no_sync());
        for (v, reply) in replies.into_iter().enumerate() {
            assert_eq!(reply.blocking_recv().unwrap().unwrap(), v as i64);
        }
        assert!(matches!(
            refused.blocking_recv().unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(seen.blocking_recv().unwrap().unwrap(), (10, 0));
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 10);
    }

    /// The writer thread's body on this thread, answering from it too (no
    /// runtime), until every sender of `jobs` is dropped.
    fn run_writer(conn: Connection, jobs: Receiver<Box<dyn Job>>, sync: SyncWal) {
        run(
            conn,
            jobs,
            Clock::system(),
            Replies::start(),
            Syncing::BeforeAnswers(sync),
            None,
            Watch::new(Default::default()),
        );
    }

    fn no_sync() -> SyncWal {
        Box::new(|| Ok(()))
    }

    type Reply<T> = Arc<Mutex<Pending<T>>>;

    fn shared<T>(reply: Pending<T>) -> Reply<T> {
        Arc::new(Mutex::new(reply))
    }

    fn answered<T>(reply: &Reply<T>) -> Option<Result<T, StoreError>> {
        reply.lock().unwrap().try_recv().ok()
    }

    type Pending<T> = oneshot::Receiver<Result<T, StoreError>>;

    /// Queues a job answered before the sync, as a new lease is (it inserts
    /// 1), and one answered after it (it inserts 2).
    fn queue_lease_and_completion(
        tx: &std::sync::mpsc::Sender<Box<dyn Job>>,
    ) -> (Pending<i64>, Pending<i64>) {
        let (job, lease) = Task::job_answered_before_sync(insert(1), |_| true);
        tx.send(job).unwrap();
        let (job, completion) = Task::job(insert(2));
        tx.send(job).unwrap();
        (lease, completion)
    }

    #[test]
    fn a_new_lease_is_answered_before_the_sync_and_everything_else_after_it() {
        let (_dir, _path, conn) = open("before-sync.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let (lease, completion) = queue_lease_and_completion(&tx);
        drop(tx);
        let (lease, completion) = (shared(lease), shared(completion));
        let at_sync = Arc::new(Mutex::new(Vec::new()));
        let sync: SyncWal = Box::new({
            let (lease, completion, at_sync) = (lease.clone(), completion.clone(), at_sync.clone());
            move || {
                let seen = (answered(&lease), answered(&completion).is_some());
                at_sync.lock().unwrap().push(seen);
                Ok(())
            }
        });

        run_writer(conn, rx, sync);
        let at_sync = at_sync.lock().unwrap();
        assert_eq!(at_sync.len(), 1, "one sync for the batch");
        assert!(
            matches!(at_sync[0], (Some(Ok(1)), false)),
            "{:?}",
            at_sync[0]
        );
        assert!(matches!(answered(&completion), Some(Ok(2))));
    }

    #[test]
    fn a_failed_sync_refuses_its_batch_and_every_later_job() {
        let (_dir, path, conn) = open("sync-failed.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let (lease, completion) = queue_lease_and_completion(&tx);
        // The sync fails, and queues one more job for a later batch.
        let later = Arc::new(Mutex::new(None));
        let sync: SyncWal = Box::new({
            let (mut tx, later) = (Some(tx), later.clone());
            move || {
                if let Some(tx) = tx.take() {
                    let (job, reply) = Task::job(insert(3));
                    tx.send(job).unwrap();
                    *later.lock().unwrap() = Some(reply);
                }
                Err(std::io::Error::other("disk gone"))
            }
        });

        run_writer(conn, rx, sync);
        assert!(matches!(lease.blocking_recv().unwrap(), Ok(1)));
        for reply in [
            completion.blocking_recv().unwrap(),
            later
                .lock()
                .unwrap()
                .take()
                .unwrap()
                .blocking_recv()
                .unwrap(),
        ] {
            let Err(error @ StoreError::Unavailable(_)) = reply else {
                panic!("{reply:?}");
            };
            assert!(error.to_string().contains("disk gone"), "{error}");
        }
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 2, "the later job never ran");
    }

    #[test]
    fn a_batch_that_only_read_is_not_synced() {
        let syncs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counting = || -> SyncWal {
            let syncs = syncs.clone();
            Box::new(move || {
                syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
        };
        let read = run_one(
            "read-only.db",
            |txn: &mut Txn<'_, '_>| count_in(txn),
            counting(),
        );
        assert!(matches!(read, Ok(0)));
        assert_eq!(syncs.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(matches!(
            run_one("written.db", insert(1), counting()),
            Ok(1)
        ));
        assert_eq!(syncs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// Runs one job alone through a writer on a fresh file `name`.
    fn run_one<T, F>(name: &str, work: F, sync: SyncWal) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Txn<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (_dir, _path, conn) = open(name);
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let (job, reply) = Task::job(work);
        tx.send(job).unwrap();
        drop(tx);
        run_writer(conn, rx, sync);
        reply.blocking_recv().unwrap()
    }

    /// Where a test's log lines go.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A full disk fails every batch that writes: one error line while it
    /// lasts (not one per batch), and a line once a batch that wrote commits.
    #[test]
    fn batches_failing_alike_are_logged_once_until_one_commits() {
        let (_dir, _path, conn) = open("failing-alike.db");
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let captured = captured.clone();
                move || captured.clone()
            })
            .with_ansi(false)
            .finish();
        // Each batch of one fails as a whole (the job wrote, then failed),
        // but for one that commits a write.
        let failing = || {
            Task::job(|txn: &mut Txn<'_, '_>| -> Result<i64, StoreError> {
                insert(1)(txn)?;
                Err(StoreError::Fenced)
            })
        };
        let mut jobs: Vec<_> = (0..5).map(|_| failing()).collect();
        jobs.push(Task::job(insert(2)));
        jobs.push(failing());
        // Each job is queued once the one before was answered, so each is a
        // batch of its own.
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let feeder = std::thread::spawn(move || {
            for (job, reply) in jobs {
                tx.send(job).unwrap();
                let _ = reply.blocking_recv();
            }
        });
        tracing::subscriber::with_default(subscriber, || run_writer(conn, rx, no_sync()));
        feeder.join().unwrap();

        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(log.matches("store transaction failed").count(), 2, "{log}");
        assert_eq!(log.matches("commit again").count(), 1, "{log}");
    }

    #[test]
    fn a_job_that_fails_after_writing_fails_its_whole_batch() {
        let (_dir, path, conn) = open("wrote-then-failed.db");
        let (tx, rx) = std::sync::mpsc::channel::<Box<dyn Job>>();
        let (job, innocent) = Task::job(insert(1));
        tx.send(job).unwrap();
        let (job, culprit) = Task::job(|txn: &mut Txn<'_, '_>| -> Result<(), StoreError> {
            insert(2)(txn)?;
            Err(StoreError::Fenced)
        });
        tx.send(job).unwrap();
        drop(tx);

        run_writer(conn, rx, no_sync());
        for reply in [
            innocent.blocking_recv().unwrap().map(|_| ()),
            culprit.blocking_recv().unwrap(),
        ] {
            assert!(
                matches!(reply, Err(StoreError::Unavailable(_))),
                "{reply:?}"
            );
        }
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 0, "nothing of the batch committed");
    }
}

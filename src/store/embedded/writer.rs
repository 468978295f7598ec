//! The one thread that owns the SQLite connection, with group commit: jobs
//! that arrive while the previous batch is being synced run in one write
//! transaction, committed once, so N concurrent reservations write their
//! pages and are synced once, not N times. The sync thread (`syncer`) makes
//! each commit durable and sends its replies.
//!
//! **One write per job.** Every job makes at most one writing statement
//! (`ops`: a reservation is one `INSERT`, or one `UPDATE` of a row it took
//! over; a completion one `UPDATE`), and SQLite undoes a failed statement's
//! own changes. So a failing job leaves nothing behind in the shared
//! transaction without a savepoint of its own (which cost two more statements
//! per job). A job that failed *after* writing would break that: the batch
//! then fails as a whole rather than commit its partial writes.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::SystemTime;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::codec::to_ms;
use super::syncer::Syncer;
use super::tokens::Tokens;
use crate::store::StoreError;

/// Bounds one transaction so a flood cannot hold the write lock (and delay the
/// first replies) indefinitely.
const MAX_BATCH: usize = 512;

pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The batch's open transaction, as one job sees it.
pub(super) struct Txn<'a> {
    pub conn: &'a Connection,
    /// The job's "now", in unix milliseconds.
    pub now: i64,
    tokens: &'a mut Tokens,
}

impl Txn<'_> {
    /// The fencing token a reservation would get: unique across the store's
    /// life once `spend_token` records that a row carries it.
    pub fn next_token(&mut self) -> Result<i64, StoreError> {
        self.tokens.peek(self.conn)
    }

    pub fn spend_token(&mut self, token: i64) {
        self.tokens.spend(token);
    }
}

/// One store operation travelling to the writer thread.
pub(super) trait Job: Send {
    /// Runs the operation on the open transaction, keeping its result for
    /// `finish`; returns whether it succeeded.
    fn run(&mut self, txn: &mut Txn<'_>) -> bool;
    /// Sends the kept result, or `Unavailable(batch_error)` when the batch's
    /// transaction did not commit.
    fn finish(self: Box<Self>, batch_error: Option<&str>);
}

pub(super) struct Task<T, F> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
{
    pub(super) fn job(work: F) -> (Box<dyn Job>, oneshot::Receiver<Result<T, StoreError>>) {
        let (reply, rx) = oneshot::channel();
        let task = Task {
            work: Some(work),
            result: None,
            reply,
        };
        (Box::new(task), rx)
    }
}

impl<T, F> Job for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(&mut self, txn: &mut Txn<'_>) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = work(txn);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn finish(self: Box<Self>, batch_error: Option<&str>) {
        let result = match (batch_error, self.result) {
            (None, Some(result)) => result,
            (Some(err), _) => Err(StoreError::Unavailable(err.to_owned())),
            (None, None) => Err(StoreError::Unavailable("operation did not run".into())),
        };
        // The caller may have gone away (request cancelled); nothing to tell it.
        let _ = self.reply.send(result);
    }
}

/// What reaches the writer thread.
pub(super) enum Input {
    Job(Box<dyn Job>),
    /// The sync thread made this many handed-over batches durable.
    Synced(usize),
    /// The store is closing: commit what is open and stop.
    Stop,
}

/// The open batch: its transaction and the jobs that ran in it.
struct Open<'c> {
    tx: Batch<'c>,
    jobs: Vec<Box<dyn Job>>,
    tokens: Tokens,
    written_before: u64,
}

/// The writer thread's body. A batch stays open, taking every job as it
/// arrives, while the previous batch is being synced; it commits as soon as
/// no sync is in flight (or at `MAX_BATCH`). So one commit is made per sync,
/// as when the writer waited in the fsync itself, and the jobs run while the
/// disk works instead of after it. Returns after `Stop`, once the sync
/// thread has answered every batch, and then closes the connection.
pub(super) fn run(conn: Connection, inputs: Receiver<Input>, clock: Clock, syncer: Syncer) {
    let mut open: Option<Open<'_>> = None;
    let mut unsynced = 0usize;
    let mut stopping = false;
    loop {
        if let Some(batch) =
            open.take_if(|b| unsynced == 0 || stopping || b.jobs.len() >= MAX_BATCH)
        {
            if commit(&conn, batch, &syncer) {
                unsynced += 1;
            }
            continue;
        }
        if stopping {
            break;
        }
        // Block for one input, then take whatever else is queued, so the
        // jobs that arrived together join the batch before it commits.
        let mut next = inputs.recv().unwrap_or(Input::Stop);
        loop {
            match next {
                Input::Job(job) => run_job(&conn, &clock, &syncer, &mut open, job),
                Input::Synced(n) => unsynced = unsynced.saturating_sub(n),
                Input::Stop => stopping = true,
            }
            next = match inputs.try_recv() {
                Ok(input) => input,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => Input::Stop,
            };
            if stopping {
                break;
            }
        }
    }
    drop(open);
    drop(syncer);
    drop(conn);
}

/// Runs one job in the open batch, opening one if none is.
fn run_job<'c>(
    conn: &'c Connection,
    clock: &Clock,
    syncer: &Syncer,
    open: &mut Option<Open<'c>>,
    mut job: Box<dyn Job>,
) {
    if let Some(refusal) = syncer.refusal() {
        syncer.send(vec![job], Some(refusal.to_owned()), false);
        return;
    }
    let batch = match open {
        Some(batch) => batch,
        None => match Batch::begin(conn) {
            Ok(tx) => open.insert(Open {
                tx,
                jobs: Vec::new(),
                tokens: Tokens::default(),
                written_before: conn.total_changes(),
            }),
            Err(e) => {
                fail(syncer, vec![job], &e);
                return;
            }
        },
    };
    let written_before = conn.total_changes();
    let mut txn = Txn {
        conn,
        now: to_ms(clock()),
        tokens: &mut batch.tokens,
    };
    let ok = job.run(&mut txn);
    batch.jobs.push(job);
    if ok {
        return;
    }
    // Some errors (I/O, full disk) make SQLite roll the whole transaction
    // back; later statements would then autocommit one by one, so the batch
    // fails instead. So it does when the failed job had written.
    let reason = if conn.is_autocommit() {
        "transaction rolled back by sqlite"
    } else if conn.total_changes() != written_before {
        "a failed operation had written; batch rolled back"
    } else {
        return;
    };
    if let Some(batch) = open.take() {
        // Dropping the transaction uncommitted rolls it back.
        let Open { tx, jobs, .. } = batch;
        drop(tx);
        fail(syncer, jobs, &abort(reason));
    }
}

/// Commits the batch and hands it to the sync thread; returns whether a
/// sync of it is now in flight.
fn commit(conn: &Connection, batch: Open<'_>, syncer: &Syncer) -> bool {
    let Open {
        tx,
        jobs,
        tokens,
        written_before,
    } = batch;
    match tokens.save(conn).and_then(|()| tx.commit()) {
        Ok(()) => {
            let wrote = conn.total_changes() != written_before;
            syncer.send(jobs, None, wrote)
        }
        Err(e) => {
            fail(syncer, jobs, &e);
            false
        }
    }
}

fn fail(syncer: &Syncer, jobs: Vec<Box<dyn Job>>, error: &rusqlite::Error) {
    let error = format!("sqlite: {error}");
    tracing::error!(error = %error, jobs = jobs.len(), "store transaction failed");
    syncer.send(jobs, Some(error), false);
}

/// The batch's write transaction. `BEGIN IMMEDIATE` and `COMMIT` run as
/// prepared statements (rusqlite's `Transaction` parses them as SQL text for
/// every batch); dropped uncommitted, it rolls back.
struct Batch<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Batch<'c> {
    fn begin(conn: &'c Connection) -> Result<Batch<'c>, rusqlite::Error> {
        // IMMEDIATE takes the write lock up front (waiting out busy_timeout
        // for another process) so no statement inside fails with SQLITE_BUSY.
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Batch { conn, open: true })
    }

    fn commit(mut self) -> Result<(), rusqlite::Error> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            let rolled_back =
                (self.conn.prepare_cached("ROLLBACK")).and_then(|mut stmt| stmt.execute([]));
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{Sender, channel};
    use std::thread::JoinHandle;
    use std::time::Duration;

    use tokio::sync::oneshot::error::TryRecvError as NoReply;

    use super::super::replies::Replies;
    use super::super::syncer::Flush;
    use super::*;

    fn unavailable(e: rusqlite::Error) -> StoreError {
        StoreError::Unavailable(e.to_string())
    }

    fn insert(v: i64) -> impl FnOnce(&mut Txn<'_>) -> Result<i64, StoreError> + Send {
        move |txn| {
            txn.conn
                .execute("INSERT INTO t (v) VALUES (?1)", [v])
                .map_err(unavailable)?;
            Ok(v)
        }
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

    /// The writer on its own thread, with `flush` as the sync.
    fn start(conn: Connection, flush: Flush) -> (Sender<Input>, JoinHandle<()>) {
        let (tx, rx) = channel();
        let syncer = Syncer::start(flush, Replies::start(), tx.clone()).unwrap();
        let writer = std::thread::spawn(move || run(conn, rx, Arc::new(SystemTime::now), syncer));
        (tx, writer)
    }

    fn send<T, F>(
        tx: &Sender<Input>,
        work: F,
    ) -> tokio::sync::oneshot::Receiver<Result<T, StoreError>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Txn<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (job, reply) = Task::job(work);
        tx.send(Input::Job(job)).unwrap();
        reply
    }

    fn stop(tx: &Sender<Input>, writer: JoinHandle<()>) {
        tx.send(Input::Stop).unwrap();
        writer.join().unwrap();
    }

    /// Jobs queued before the writer starts: one batch.
    fn run_queued(conn: Connection, tx: Sender<Input>, rx: Receiver<Input>) {
        tx.send(Input::Stop).unwrap();
        let syncer = Syncer::start(Box::new(|| Ok(())), Replies::start(), tx).unwrap();
        run(conn, rx, Arc::new(SystemTime::now), syncer);
    }

    #[test]
    fn queued_jobs_share_one_transaction_and_a_failing_statement_only_undoes_itself() {
        let (_dir, path, conn) = open("batch.db");
        let (tx, rx) = channel();
        let replies: Vec<_> = (0..10).map(|v| send(&tx, insert(v))).collect();
        // Refused by the CHECK: SQLite undoes that statement alone.
        let refused = send(&tx, insert(100));
        // Inside the batch: this connection sees 10 rows, another sees none
        // (nothing committed yet), so the batch is one transaction.
        let observer = path.clone();
        let seen = send(&tx, move |txn: &mut Txn<'_>| {
            let other = Connection::open(&observer).map_err(unavailable)?;
            Ok((count(txn.conn)?, count(&other)?))
        });
        run_queued(conn, tx, rx);
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

    #[test]
    fn a_job_that_fails_after_writing_fails_its_whole_batch() {
        let (_dir, path, conn) = open("wrote-then-failed.db");
        let (tx, rx) = channel();
        let innocent = send(&tx, insert(1));
        let culprit = send(&tx, |txn: &mut Txn<'_>| -> Result<(), StoreError> {
            insert(2)(txn)?;
            Err(StoreError::Fenced)
        });
        run_queued(conn, tx, rx);
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

    /// A sync that waits for the test's go, counting its calls.
    fn gated() -> (Sender<()>, Arc<AtomicUsize>, Flush) {
        let (go, gate) = channel::<()>();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let flush: Flush = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            gate.recv().map_err(std::io::Error::other)
        });
        (go, calls, flush)
    }

    #[test]
    fn a_reply_waits_for_the_sync_of_its_commit() {
        let (_dir, path, conn) = open("waits.db");
        let (go, _, flush) = gated();
        let (tx, writer) = start(conn, flush);
        let mut reply = send(&tx, insert(7));
        std::thread::sleep(Duration::from_millis(100));
        // Committed (another connection sees it), not yet acknowledged.
        let other = Connection::open(&path).unwrap();
        assert_eq!(count(&other).unwrap(), 1);
        assert!(
            matches!(reply.try_recv(), Err(NoReply::Empty)),
            "answered before its commit was synced"
        );
        go.send(()).unwrap();
        assert_eq!(reply.blocking_recv().unwrap().unwrap(), 7);
        drop(go);
        stop(&tx, writer);
    }

    #[test]
    fn jobs_arriving_during_a_sync_run_at_once_and_commit_together_after_it() {
        let (_dir, path, conn) = open("during.db");
        let (go, calls, flush) = gated();
        let (tx, writer) = start(conn, flush);
        let first = send(&tx, insert(1));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the first commit is being synced"
        );
        // These run while that sync is held: inside one open transaction.
        let later: Vec<_> = (2..5).map(|v| send(&tx, insert(v))).collect();
        let observer = path.clone();
        let seen = send(&tx, move |txn: &mut Txn<'_>| {
            let other = Connection::open(&observer).map_err(unavailable)?;
            Ok((count(txn.conn)?, count(&other)?))
        });
        std::thread::sleep(Duration::from_millis(50));
        go.send(()).unwrap();
        assert_eq!(first.blocking_recv().unwrap().unwrap(), 1);
        // Released by the first sync's end: one commit, one more sync.
        go.send(()).unwrap();
        for (v, reply) in (2..5).zip(later) {
            assert_eq!(reply.blocking_recv().unwrap().unwrap(), v);
        }
        assert_eq!(seen.blocking_recv().unwrap().unwrap(), (4, 1));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "two commits, two syncs");
        drop(go);
        stop(&tx, writer);
    }

    #[test]
    fn after_a_failed_sync_every_batch_is_refused() {
        let (_dir, path, conn) = open("sync-failed.db");
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let flush: Flush = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err(std::io::Error::other("disk gone"))
        });
        let (tx, writer) = start(conn, flush);
        let first = send(&tx, insert(1)).blocking_recv().unwrap();
        assert!(
            matches!(&first, Err(StoreError::Unavailable(e)) if e.contains("disk gone")),
            "{first:?}"
        );
        // Sent after the failure: refused without running.
        let later = send(&tx, insert(2)).blocking_recv().unwrap();
        assert!(
            matches!(&later, Err(StoreError::Unavailable(e)) if e.contains("restarts")),
            "{later:?}"
        );
        stop(&tx, writer);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "no sync after the failed one"
        );
        let after = Connection::open(&path).unwrap();
        assert_eq!(count(&after).unwrap(), 1, "the second job never ran");
    }
}

//! The pool's connections, lent to one operation at a time, and the
//! deadline an operation has for its answers (`within`).
//!
//! A statement given up on stays on its connection: the driver reads its
//! answer, whenever it comes, before any later statement's. Behind PgBouncer
//! in session mode with more connections than it has server connections,
//! the statement waits in PgBouncer's queue for as long as other sessions
//! keep the server connections; a server connection can stall (a network, a
//! host). Lent again, such a connection made each later operation handed it
//! wait behind the stale statement and fail at its own deadline: about one
//! request per round of the pool, long after the load dropped. So a
//! connection still lent to an operation when it ends unfinished (its
//! deadline passed, or its caller stopped waiting, as `/readyz` does) is
//! closed and taken out of the pool, which connects afresh for the next
//! operation (docs/postgres.md, "Connection poolers").
//!
//! While the server has no room for another connection (`crowded`), an
//! operation that finds none free waits for one to come back instead of
//! asking the server for another.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use deadpool_postgres::{Object, PoolError, TimeoutType, Timeouts};
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Timeout};

use super::cause::PostgresCause;
use super::crowded::{Crowded, Gate, no_room};

/// How often an operation waiting for a connection to come back looks
/// again, should it miss the word of one: a connection that goes back to
/// the pool wakes the waiters at once.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

tokio::task_local! {
    /// The operation `within` runs, which the connections lent to it
    /// answer to.
    static OPERATION: Operation;
}

/// Set when the operation ends: a connection still lent to it then was
/// left with a statement unanswered (or between two).
#[derive(Clone, Default)]
struct Operation(Arc<AtomicBool>);

impl Operation {
    fn end(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn ended(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// deadpool's pool, lending its connections as `Lent`.
#[derive(Clone)]
pub struct Pool {
    pool: deadpool_postgres::Pool,
    /// Where it connects (`server::named`), for what a failed connection
    /// is told with.
    server: Arc<str>,
    crowded: Crowded,
    /// Taken, while connecting is paused, to look for a free connection
    /// and take it: two operations never both see the same one free and
    /// one of them then connect.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Pool {
    pub fn new(pool: deadpool_postgres::Pool, server: String) -> Pool {
        Pool {
            pool,
            server: server.into(),
            crowded: Crowded::default(),
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    pub async fn get(&self) -> Result<Lent, PostgresCause> {
        self.timeout_get(&self.timeouts()).await
    }

    /// A connection: a free one, else a new one; while the server has no
    /// room for more (`crowded`), one that comes back within `timeouts.wait`,
    /// else the server's refusal. Every one of the pool's connections still
    /// busy at the end of that wait, with the server not refusing, is
    /// `PoolBusy`.
    pub async fn timeout_get(&self, timeouts: &Timeouts) -> Result<Lent, PostgresCause> {
        let waited_out = timeouts.wait.map(|wait| Instant::now() + wait);
        loop {
            let (got, probe) = match self.crowded.gate() {
                Gate::Open => (self.pool.timeout_get(timeouts).await, false),
                Gate::Shared { refusal, probe } => {
                    let returned = self.crowded.returned();
                    if !self.crowded.paused() {
                        // The pause ended since the gate was read: a
                        // connection that came back meanwhile told nobody.
                        continue;
                    }
                    let turn = self.turn.lock().await;
                    let status = self.pool.status();
                    if status.available > 0 || probe {
                        let got = self.pool.timeout_get(timeouts).await;
                        drop(turn);
                        (got, probe && status.available == 0)
                    } else if status.size == 0 {
                        return Err(PostgresCause::Pool(refusal));
                    } else {
                        drop(turn);
                        let mut look = LOOK_AGAIN;
                        if let Some(at) = waited_out {
                            look = look.min(at.saturating_duration_since(Instant::now()));
                            if look.is_zero() {
                                // None came back in time: the server's
                                // limit is what kept this operation out.
                                return Err(PostgresCause::Pool(refusal));
                            }
                        }
                        let _ = tokio::time::timeout(look, returned).await;
                        continue;
                    }
                }
            };
            match got {
                Ok(client) => {
                    if probe {
                        self.crowded.made();
                    }
                    return Ok(Lent {
                        client: Some(client),
                        operation: OPERATION.try_with(Operation::clone).ok(),
                        crowded: self.crowded.clone(),
                    });
                }
                Err(err) if no_room(&err) => {
                    let refusal = self.crowded.refused(err);
                    // Nothing to share: the refusal is the answer.
                    if self.pool.status().size == 0 {
                        return Err(PostgresCause::Pool(refusal));
                    }
                }
                Err(PoolError::Timeout(TimeoutType::Wait)) => {
                    return Err(PostgresCause::PoolBusy {
                        waited: timeouts.wait.unwrap_or_default(),
                        pool_size: self.max_size(),
                    });
                }
                // Making a connection failed, or took too long.
                Err(err @ (PoolError::Backend(_) | PoolError::Timeout(TimeoutType::Create))) => {
                    return Err(PostgresCause::Connect {
                        server: self.server.clone(),
                        source: Arc::new(err),
                    });
                }
                Err(err) => return Err(PostgresCause::Pool(Arc::new(err))),
            }
        }
    }

    /// How many connections the pool may hold.
    pub fn max_size(&self) -> usize {
        self.pool.status().max_size
    }

    pub fn timeouts(&self) -> Timeouts {
        self.pool.timeouts()
    }
}

/// A pooled connection, back to the pool when dropped, unless the operation
/// it was lent to (inside `within`) ended first. It must not outlive that
/// operation's work.
pub struct Lent {
    client: Option<Object>,
    operation: Option<Operation>,
    crowded: Crowded,
}

impl Deref for Lent {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.client.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut Object {
        self.client.as_mut().expect("present until dropped")
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if self.operation.as_ref().is_some_and(Operation::ended) {
            // Out of the pool and dropped: its driver task is stopped and
            // the socket closed, with whatever was still owed on it.
            drop(Object::take(client));
            tracing::warn!(
                "closed a postgres connection whose statement was given up before its answer came; the pool opens another when one is needed"
            );
        } else {
            drop(client);
        }
        // Back in the pool, or a slot freed for a new one.
        self.crowded.came_back();
    }
}

/// Runs `work` for at most `deadline`; `None` when it passed first. The
/// connections lent to `work` and still held when it ends unfinished (at the
/// deadline, or dropped by its caller) are closed.
pub fn within<F: Future>(deadline: Duration, work: F) -> impl Future<Output = Option<F::Output>> {
    let operation = Operation::default();
    let work = OPERATION.scope(operation.clone(), work);
    Bounded {
        operation,
        work: Box::pin(tokio::time::timeout(deadline, work)),
    }
}

struct Bounded<F: Future> {
    operation: Operation,
    work: Pin<Box<Timeout<TaskLocalFuture<Operation, F>>>>,
}

impl<F: Future> Future for Bounded<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.work.as_mut().poll(cx).map(Result::ok)
    }
}

impl<F: Future> Drop for Bounded<F> {
    /// Ended before `work` is dropped, so that what `work` still holds sees
    /// it. Finished work holds nothing: its connections went back as it
    /// returned.
    fn drop(&mut self) {
        self.operation.end();
    }
}

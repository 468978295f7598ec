//! Running a batch of reservations or completions (see `batch`) as one
//! statement, and telling each caller what became of its own.

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use super::cause::PostgresCause;
use super::lent::{self, Pool};
use super::pool::{db_error, pool_error};
use super::rows::{self, Decided, KeptFor, Recorded};
use super::sql;
use super::unanswered::{self, Claimed, Counting, Why};
use crate::store::{Lease, RecordId, Reservation, StoreError, StoredResponse};

/// What a reservation learned from its batch.
pub enum Reserved {
    Done(Reservation, Option<KeptFor>),
    /// Not decided here: run the single-key statement. `may_have_committed`
    /// when the batch's connection died under it (a run again recognises
    /// the record by its claim).
    Alone {
        may_have_committed: bool,
    },
}

pub struct ReserveJob {
    pub id: RecordId,
    pub fingerprint: String,
    pub lease_ms: i64,
    /// This reservation's (`unanswered::claim`).
    pub claim: [u8; 16],
    pub reply: oneshot::Sender<Result<Reserved, StoreError>>,
}

/// What a completion learned from its batch.
pub enum Completed {
    /// Recorded: the record's fingerprint and expiry.
    Done(Recorded),
    Fenced,
    /// Not decided here: run the single-lease statement. `may_have_committed`
    /// when the batch's connection died under it.
    Alone {
        may_have_committed: bool,
    },
}

pub struct CompleteJob {
    pub lease: Lease,
    pub response: StoredResponse,
    pub retain_ms: i64,
    pub reply: oneshot::Sender<Completed>,
}

/// How a batch statement failed.
enum Failed {
    /// The database refused it (one bad row fails them all, or two batches
    /// deadlocked): nothing was written, each operation may try alone.
    Refused,
    /// The connection died under it: it may have committed.
    ConnectionLost,
    /// Sent, and no answer came in time (or the driver failed reading it):
    /// it may have committed.
    Unanswered(StoreError),
    /// No connection, or the database cancelled it (a stall): nothing written.
    Unavailable(StoreError),
}

pub async fn reserve(pool: &Pool, deadline: Duration, counting: &Counting, jobs: Vec<ReserveJob>) {
    // A caller that gave up waiting (its deadline passed while the job was
    // queued) would never hear of its key reserved: not asked for.
    let jobs: Vec<ReserveJob> = jobs.into_iter().filter(|j| !j.reply.is_closed()).collect();
    if jobs.is_empty() {
        return;
    }
    // One statement may not touch a row twice: repeats run alone.
    let mut seen = HashSet::with_capacity(jobs.len());
    let (batch, repeats): (Vec<ReserveJob>, Vec<ReserveJob>) = jobs
        .into_iter()
        .partition(|job| seen.insert(job.id.clone()));
    for job in repeats {
        let _ = job.reply.send(Ok(Reserved::Alone {
            may_have_committed: false,
        }));
    }
    let routes: Vec<&str> = batch.iter().map(|j| &*j.id.route).collect();
    let scopes: Vec<&str> = batch.iter().map(|j| &*j.id.scope).collect();
    let keys: Vec<&str> = batch.iter().map(|j| &*j.id.key).collect();
    let fingerprints: Vec<&str> = batch.iter().map(|j| j.fingerprint.as_str()).collect();
    let leases: Vec<i64> = batch.iter().map(|j| j.lease_ms).collect();
    let claims: Vec<&[u8]> = batch.iter().map(|j| &j.claim[..]).collect();
    let result = run(
        pool,
        deadline,
        sql::RESERVE_MANY,
        &[
            (&routes, Type::TEXT_ARRAY),
            (&scopes, Type::TEXT_ARRAY),
            (&keys, Type::TEXT_ARRAY),
            (&fingerprints, Type::TEXT_ARRAY),
            (&leases, Type::INT8_ARRAY),
            (&claims, Type::BYTEA_ARRAY),
        ],
    )
    .await;
    let rows = match result {
        Ok(rows) => rows,
        Err(failed) => {
            for job in batch {
                // A lost connection may have committed the batch: each
                // reservation runs again alone, and finds its own record
                // (its claim) if so. One whose caller stopped waiting, or
                // that is given up here, is freed (`unanswered`).
                let reply = match &failed {
                    Failed::Refused => Ok(Reserved::Alone {
                        may_have_committed: false,
                    }),
                    Failed::ConnectionLost => Ok(Reserved::Alone {
                        may_have_committed: true,
                    }),
                    Failed::Unanswered(err) | Failed::Unavailable(err) => Err(err.clone()),
                };
                let claimed = job.claimed(deadline);
                let given_up = match &failed {
                    Failed::ConnectionLost => job.reply.send(reply).is_err(),
                    Failed::Unanswered(_) => {
                        let _ = job.reply.send(reply);
                        true
                    }
                    Failed::Refused | Failed::Unavailable(_) => {
                        let _ = job.reply.send(reply);
                        false
                    }
                };
                if given_up {
                    let counting = counting.clone();
                    unanswered::free(pool.clone(), deadline, counting, claimed, Why::AnswerLost);
                }
            }
            return;
        }
    };
    let mut by_job: Vec<Vec<Row>> = batch.iter().map(|_| Vec::new()).collect();
    for row in rows {
        if let Some(slot) = position(&row).and_then(|at| by_job.get_mut(at)) {
            slot.push(row);
        }
    }
    for (job, rows) in batch.into_iter().zip(by_job) {
        let reply = match rows::decide(&job.id, &rows) {
            Ok(Decided::Done { reservation, kept }) => Ok(Reserved::Done(reservation, kept)),
            Ok(Decided::Retry) => Ok(Reserved::Alone {
                may_have_committed: false,
            }),
            Err(err) => Err(err),
        };
        // A key reserved for a caller that gave up waiting while the batch
        // ran (its deadline passed): nobody holds the lease, and every retry
        // would be refused as in flight until it ran out (`lock_timeout`).
        // Freed beside the worker: under a stall each release may take the
        // whole deadline, and the batches queued behind must not wait.
        let claimed = job.claimed(deadline);
        if let Err(Ok(Reserved::Done(Reservation::Reserved(_), _))) = job.reply.send(reply) {
            let counting = counting.clone();
            unanswered::free(
                pool.clone(),
                deadline,
                counting,
                claimed,
                Why::NobodyWaiting,
            );
        }
    }
}

impl ReserveJob {
    fn claimed(&self, deadline: Duration) -> Claimed {
        let lease_for = Duration::from_millis(u64::try_from(self.lease_ms).unwrap_or(0));
        Claimed::new(self.id.clone(), self.claim, lease_for, deadline)
    }
}

pub async fn complete(pool: &Pool, deadline: Duration, jobs: Vec<CompleteJob>) {
    let ids = || jobs.iter().map(|j| &j.lease.id);
    let routes: Vec<&str> = ids().map(|id| &*id.route).collect();
    let scopes: Vec<&str> = ids().map(|id| &*id.scope).collect();
    let keys: Vec<&str> = ids().map(|id| &*id.key).collect();
    let tokens: Vec<i64> = jobs.iter().map(|j| j.lease.token).collect();
    let statuses: Vec<i32> = jobs.iter().map(|j| i32::from(j.response.status)).collect();
    let (mut names, mut values) = (Vec::<&str>::new(), Vec::<&[u8]>::new());
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    for job in &jobs {
        // Postgres arrays are 1-based; an answer without headers gets hi < lo.
        lo.push(slice_bound(names.len() + 1));
        for (name, value) in job.response.headers.iter() {
            names.push(name);
            values.push(&value[..]);
        }
        hi.push(slice_bound(names.len()));
    }
    let bodies: Vec<&[u8]> = jobs.iter().map(|j| &j.response.body[..]).collect();
    let omitted: Vec<bool> = jobs.iter().map(|j| j.response.body_omitted).collect();
    let retains: Vec<i64> = jobs.iter().map(|j| j.retain_ms).collect();
    let unknown: Vec<bool> = jobs.iter().map(|j| j.response.outcome_unknown).collect();
    let result = run(
        pool,
        deadline,
        sql::COMPLETE_MANY,
        &[
            (&routes, Type::TEXT_ARRAY),
            (&scopes, Type::TEXT_ARRAY),
            (&keys, Type::TEXT_ARRAY),
            (&tokens, Type::INT8_ARRAY),
            (&statuses, Type::INT4_ARRAY),
            (&names, Type::TEXT_ARRAY),
            (&values, Type::BYTEA_ARRAY),
            (&lo, Type::INT4_ARRAY),
            (&hi, Type::INT4_ARRAY),
            (&bodies, Type::BYTEA_ARRAY),
            (&omitted, Type::BOOL_ARRAY),
            (&retains, Type::INT8_ARRAY),
            (&unknown, Type::BOOL_ARRAY),
        ],
    )
    .await;
    let mut recorded: Vec<Option<Recorded>> = jobs.iter().map(|_| None).collect();
    let alone = match result {
        Ok(rows) => {
            for row in rows {
                if let (Some(at), Ok(written)) = (position(&row), rows::recorded(&row))
                    && let Some(slot) = recorded.get_mut(at)
                {
                    *slot = Some(written);
                }
            }
            None
        }
        Err(Failed::Refused) => Some(false),
        Err(Failed::ConnectionLost | Failed::Unanswered(_) | Failed::Unavailable(_)) => Some(true),
    };
    for (job, written) in jobs.into_iter().zip(recorded) {
        let _ = job.reply.send(match (alone, written) {
            (Some(may_have_committed), _) => Completed::Alone { may_have_committed },
            (None, Some(written)) => Completed::Done(written),
            (None, None) => Completed::Fenced,
        });
    }
}

/// The database cancelled the statement for taking too long
/// (`statement_timeout`, or a `lock_timeout` an operator set): nothing about
/// its rows.
fn stalled(err: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    err.code().is_some_and(|code| {
        *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE
    })
}

/// The 0-based job index of a row (`n` is 1-based).
fn position(row: &Row) -> Option<usize> {
    let n: i64 = row.try_get("n").ok()?;
    usize::try_from(n).ok()?.checked_sub(1)
}

fn slice_bound(at: usize) -> i32 {
    i32::try_from(at).unwrap_or(i32::MAX)
}

/// Runs one batch statement as an unnamed statement: parsed, planned and
/// executed in one round trip, and planned for these arrays and the table as
/// it is now. A prepared statement would keep the plan it was given while the
/// table was empty (sequential scans), which the bench showed getting slower
/// with every row (3.4k, then 1.9k new keys a second).
async fn run(
    pool: &Pool,
    deadline: Duration,
    statement: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, Failed> {
    let mut sent = false;
    let work = async {
        let client = pool
            .get()
            .await
            .map_err(|err| Failed::Unavailable(pool_error(err)))?;
        sent = true;
        client.query_typed(statement, params).await.map_err(|err| {
            if super::pool::session_lost(&client, &err) {
                Failed::ConnectionLost
            } else if stalled(&err) {
                // Run alone, each operation would wait out the same stall
                // again (a table locked, a database overloaded): twice the
                // wait for its caller, and one statement per operation where
                // there was one for the batch.
                Failed::Unavailable(db_error(err))
            } else if err.as_db_error().is_some() {
                Failed::Refused
            } else {
                Failed::Unanswered(db_error(err))
            }
        })
    };
    let result = lent::within(deadline, work).await;
    result.unwrap_or_else(|| {
        let err = PostgresCause::NoAnswer(deadline).into();
        Err(if sent {
            Failed::Unanswered(err)
        } else {
            Failed::Unavailable(err)
        })
    })
}

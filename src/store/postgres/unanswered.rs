//! Reservations the database may have made without the gateway hearing of
//! it: the statement was sent, and its connection broke (a failover, a cut
//! network, a terminated session) or its deadline passed before the answer
//! came. Committed, such a record would hold its key in flight, run by no
//! one, and every retry would get 409 until the lease ran out.
//!
//! So each reservation writes a claim of its own, 16 random bytes, beside
//! the token the database draws (in the in-flight record's body, see
//! `sql::RESERVE`): a run again of the same reservation recognises the
//! record as its own (`rows::decide`), and one given up is deleted by its
//! claim (`free`), which only ever matches the record this reservation
//! made — never another request's or another gateway's, nor one that took
//! the key over.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::types::ToSql;

use super::lent::{self, Pool};
use super::pool::{db_error, pool_error};
use super::sql;
use crate::store::{LeaseRetry, RecordId, StoreError};

/// Pause before freeing is tried again, doubled up to `RETRY_MAX` (as a
/// release the guard retries).
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// A fresh claim: a random (v4) UUID's bytes, 122 random bits.
pub fn claim() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// The record a reservation given up may have made: its key and claim.
pub struct Claimed {
    id: RecordId,
    claim: [u8; 16],
    /// No sooner than the end of the lease it would have written (by this
    /// process's clock, taken after the statement was sent): freeing is not
    /// tried past it, when the key is free to a takeover anyway.
    until: SystemTime,
    /// Until then, a statement still on its way or still running (it waits
    /// on a lock) may yet commit: a delete that finds nothing before it is
    /// tried again. `statement_timeout` cancels such a statement within the
    /// store's deadline.
    settled: Instant,
}

impl Claimed {
    /// Given up now, by a store whose operations last at most `deadline`.
    pub fn new(id: RecordId, claim: [u8; 16], lease_for: Duration, deadline: Duration) -> Claimed {
        Claimed {
            id,
            claim,
            until: SystemTime::now() + lease_for,
            settled: Instant::now() + deadline,
        }
    }
}

/// What freeing a reservation given up came to
/// (`idemgate_unanswered_reservations_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freed {
    /// Its record was deleted: it had committed.
    Freed,
    /// There was none: it had not committed (or was taken over since).
    Nothing,
    /// It could not be deleted before its lease ran out.
    Held,
}

impl Freed {
    pub const ALL: [Freed; 3] = [Freed::Freed, Freed::Nothing, Freed::Held];

    pub fn as_str(self) -> &'static str {
        match self {
            Freed::Freed => "freed",
            Freed::Nothing => "none",
            Freed::Held => "held",
        }
    }
}

/// Told what each freeing came to (the gateway counts it).
pub type FreedHook = Arc<dyn Fn(Freed) + Send + Sync>;

/// Where the store keeps its `FreedHook` once one is given (`serve`): the
/// batch workers start before.
#[derive(Clone, Default)]
pub struct Counting(Arc<OnceLock<FreedHook>>);

impl Counting {
    /// The first hook given stays.
    pub fn set(&self, hook: FreedHook) {
        let _ = self.0.set(hook);
    }

    fn tell(&self, freed: Freed) {
        if let Some(hook) = self.0.get() {
            hook(freed);
        }
    }
}

/// Why a lease is freed here.
#[derive(Debug, Clone, Copy)]
pub enum Why {
    /// The statement's answer was lost, and the reservation failed.
    AnswerLost,
    /// The batch reserved it after its caller stopped waiting.
    NobodyWaiting,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::AnswerLost => "answer_lost",
            Why::NobodyWaiting => "nobody_waiting",
        }
    }
}

/// Deletes, in the background and on another connection, the record
/// `claimed` is if its reservation committed (in flight, under its claim),
/// tried again with a growing pause while the lease would hold; past it, a
/// takeover may have the key, under another claim anyway.
pub fn free(pool: Pool, deadline: Duration, counting: Counting, claimed: Claimed, why: Why) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut retry = LeaseRetry::new(RETRY_FIRST, RETRY_MAX);
        let (route, key) = (&claimed.id.route, crate::key::short_hash(&claimed.id.key));
        loop {
            let released = release(&pool, deadline, &claimed).await;
            match (released, retry.pause_before(claimed.until)) {
                (Ok(0), Some(pause)) if Instant::now() < claimed.settled => {
                    retry.sleep(pause).await;
                }
                (Ok(0), _) => {
                    // It did not commit, or was taken over since.
                    tracing::debug!(%route, %key, why = why.as_str(), "no record to free for a reservation given up");
                    counting.tell(Freed::Nothing);
                    return;
                }
                (Ok(_), _) => {
                    tracing::info!(%route, %key, why = why.as_str(), "freed a key whose reservation was made without its answer reaching the gateway");
                    counting.tell(Freed::Freed);
                    return;
                }
                (Err(err), None) => {
                    tracing::warn!(%route, %key, why = why.as_str(), error = %err,
                        "a key whose reservation may have been made without its answer reaching the gateway could not be freed; it is held until its lease runs out");
                    counting.tell(Freed::Held);
                    return;
                }
                (Err(err), Some(pause)) => {
                    tracing::debug!(%route, %key, error = %err, "freeing a reservation given up failed; retrying while its lease would hold");
                    retry.sleep(pause).await;
                }
            }
        }
    });
}

/// One `RELEASE_CLAIMED`, bounded by `deadline`: how many records it deleted.
async fn release(pool: &Pool, deadline: Duration, claimed: &Claimed) -> Result<u64, StoreError> {
    let (route, scope, key) = claimed.id.parts();
    let claim: &[u8] = &claimed.claim;
    let params: [&(dyn ToSql + Sync); 4] = [&route, &scope, &key, &claim];
    let work = async {
        let client = pool.get().await.map_err(pool_error)?;
        let stmt = client
            .prepare_cached(sql::RELEASE_CLAIMED)
            .await
            .map_err(db_error)?;
        client.execute(&stmt, &params).await.map_err(db_error)
    };
    lent::within(deadline, work)
        .await
        .unwrap_or_else(|| Err(super::cause::PostgresCause::NoAnswer(deadline).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_differ() {
        let claims: std::collections::HashSet<[u8; 16]> = (0..1000).map(|_| claim()).collect();
        assert_eq!(claims.len(), 1000);
    }
}

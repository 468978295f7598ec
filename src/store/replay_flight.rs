//! One store read at a time of a record, for the lookups the in-memory
//! copies cannot answer (`replay_cache.rs`; an answer over their entry
//! limit is never copied): lookups of one record that arrive while a read
//! of it runs wait for that read and share what it gave, one `Bytes` for
//! all, instead of each reading (and holding) its own copy. A burst of
//! replays of one large answer would otherwise hold one copy per client
//! before anything could refuse them (docs/behaviour.md, "Memory").
//!
//! A lookup may also take a key (`reserve`), so only what is the same for
//! every lookup is shared: a completed record, which only a purge or its
//! expiry change, judged by each lookup against its own fingerprint (its
//! answer, or a mismatch); and a failed read. Anything else (a key just
//! taken, in flight, or held under another fingerprint) is each lookup's
//! to ask for itself. Nothing outlives the read: the next lookup after it
//! reads again.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use tokio::sync::watch;

use super::{Kept, RecordId, Reservation, StoreError, StoredResponse};

type Read = Result<(Reservation, Option<Kept>), StoreError>;

/// What a read gave that the lookups which waited for it may use.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A completed record, with the fingerprint it was completed under.
    Completed {
        fingerprint: Arc<str>,
        response: StoredResponse,
        kept: Option<Kept>,
    },
    /// The read failed, for every lookup that waited for it alike.
    Failed(StoreError),
    /// Each lookup asks the store itself.
    Own,
}

impl Outcome {
    /// What `read`, made for a lookup with `fingerprint`, tells the others.
    pub fn of(read: &Read, fingerprint: &str) -> Outcome {
        match read {
            Ok((Reservation::Completed(response), kept)) => Outcome::Completed {
                fingerprint: fingerprint.into(),
                response: response.clone(),
                kept: *kept,
            },
            Err(error) => Outcome::Failed(error.clone()),
            Ok(_) => Outcome::Own,
        }
    }

    /// The answer for a lookup with `fingerprint`, or `None`: it asks the
    /// store itself (also when the record expired meanwhile).
    pub fn answer_for(self, fingerprint: &str) -> Option<Read> {
        match self {
            Outcome::Completed {
                fingerprint: completed_under,
                response,
                kept,
            } => {
                if kept.is_some_and(|kept| kept.expires_here <= SystemTime::now()) {
                    return None;
                }
                Some(Ok(if *completed_under == *fingerprint {
                    (Reservation::Completed(response), kept)
                } else {
                    (Reservation::Mismatch, None)
                }))
            }
            Outcome::Failed(error) => Some(Err(error)),
            Outcome::Own => None,
        }
    }
}

/// The reads running now, one per record at most.
#[derive(Default)]
pub struct Flights {
    running: Mutex<foldhash::HashMap<RecordId, Flight>>,
}

struct Flight {
    /// The purges counted when the read began: one made since may have
    /// deleted what it reads, so later lookups do not wait for it.
    generation: u64,
    outcome: watch::Receiver<Option<Outcome>>,
}

/// A lookup's part in the read of its record.
pub enum Turn<'a> {
    /// No read of it runs: this lookup makes one and tells the others.
    Lead(Leading<'a>),
    /// One runs: wait for what it gives.
    Join(Joining),
}

impl Flights {
    /// Joins the read of `id` running since the `generation`th purge, or
    /// begins one.
    pub fn turn(&self, id: &RecordId, generation: u64) -> Turn<'_> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = running.get(id)
            && flight.generation == generation
        {
            return Turn::Join(Joining(flight.outcome.clone()));
        }
        let (sender, outcome) = watch::channel(None);
        running.insert(
            id.clone(),
            Flight {
                generation,
                outcome: outcome.clone(),
            },
        );
        Turn::Lead(Leading {
            flights: self,
            id: id.clone(),
            sender,
            outcome,
        })
    }

    /// Reads running now (tests).
    #[cfg(test)]
    fn running(&self) -> usize {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The lookup that reads. Dropped without landing (its future dropped),
/// its waiters ask the store themselves.
pub struct Leading<'a> {
    flights: &'a Flights,
    id: RecordId,
    sender: watch::Sender<Option<Outcome>>,
    /// To know its own flight from a later one of the same record.
    outcome: watch::Receiver<Option<Outcome>>,
}

impl Leading<'_> {
    /// Tells the waiters what the read gave. A lookup that comes after
    /// this reads again.
    pub fn land(self, outcome: Outcome) {
        self.end();
        self.sender.send_replace(Some(outcome));
    }

    fn end(&self) {
        let mut running = (self.flights.running.lock()).unwrap_or_else(PoisonError::into_inner);
        if running
            .get(&self.id)
            .is_some_and(|flight| flight.outcome.same_channel(&self.outcome))
        {
            running.remove(&self.id);
        }
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

/// A lookup waiting for another's read.
pub struct Joining(watch::Receiver<Option<Outcome>>);

impl Joining {
    /// What the read gave; `None` when its lookup went away before it ended.
    pub async fn outcome(mut self) -> Option<Outcome> {
        let outcome = self.0.wait_for(Option::is_some).await.ok()?;
        outcome.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn id(key: &str) -> RecordId {
        RecordId::new("r", "s", key)
    }

    fn completed(body: &Bytes) -> Read {
        let response = StoredResponse {
            status: 201,
            headers: StoredResponse::header_list([("content-type", "application/json")]),
            body: body.clone(),
            body_omitted: false,
            outcome_unknown: false,
        };
        let later = SystemTime::now() + Duration::from_secs(60);
        let kept = Kept {
            expires_at: later,
            expires_here: later,
            age: None,
        };
        Ok((Reservation::Completed(response), Some(kept)))
    }

    fn lead<'a>(flights: &'a Flights, key: &str, generation: u64) -> Leading<'a> {
        match flights.turn(&id(key), generation) {
            Turn::Lead(leading) => leading,
            Turn::Join(_) => panic!("{key}: a read already runs"),
        }
    }

    fn join(flights: &Flights, key: &str, generation: u64) -> Joining {
        match flights.turn(&id(key), generation) {
            Turn::Join(joining) => joining,
            Turn::Lead(_) => panic!("{key}: no read to join"),
        }
    }

    fn body_of(read: Read) -> Bytes {
        match read {
            Ok((Reservation::Completed(response), _)) => response.body,
            other => panic!("not an answer: {other:?}"),
        }
    }

    /// Lookups that arrive while a read runs get its one body, not copies;
    /// one with another fingerprint is told the mismatch; another record
    /// has its own read.
    #[tokio::test]
    async fn lookups_during_a_read_share_its_answer() {
        let flights = Flights::default();
        let leading = lead(&flights, "k", 0);
        let same = join(&flights, "k", 0);
        let other_fingerprint = join(&flights, "k", 0);
        let other_key = lead(&flights, "other", 0);
        assert_eq!(flights.running(), 2);

        let body = Bytes::from(vec![7u8; 4096]);
        let read = completed(&body);
        leading.land(Outcome::of(&read, "fp"));
        assert_eq!(flights.running(), 1, "only the other key's read runs");

        let shared = same.outcome().await.expect("an outcome");
        let shared = body_of(shared.answer_for("fp").expect("shared"));
        assert_eq!(shared.as_ptr(), body.as_ptr(), "the one body, not a copy");
        let mismatch = other_fingerprint.outcome().await.expect("an outcome");
        assert!(matches!(
            mismatch.answer_for("another"),
            Some(Ok((Reservation::Mismatch, None)))
        ));
        drop(other_key);
        assert_eq!(flights.running(), 0);
    }

    /// A failed read is told to its waiters and kept for no one after it:
    /// the next lookup reads again.
    #[tokio::test]
    async fn a_failure_is_shared_within_its_read_and_not_kept() {
        let flights = Flights::default();
        let leading = lead(&flights, "k", 0);
        let waiting = join(&flights, "k", 0);
        let failed: Read = Err(StoreError::invariant("a read that failed"));
        leading.land(Outcome::of(&failed, "fp"));
        let told = waiting.outcome().await.expect("an outcome");
        assert!(matches!(told.answer_for("fp"), Some(Err(_))));

        let again = lead(&flights, "k", 0);
        let body = Bytes::from_static(b"{}");
        again.land(Outcome::of(&completed(&body), "fp"));
        assert_eq!(flights.running(), 0, "nothing kept after a read");
        lead(&flights, "k", 0);
    }

    /// Only a completed record is shared: a key just taken (or in flight,
    /// or a mismatch) is each lookup's to ask for, as is a read whose lookup
    /// went away, and a record past its expiry.
    #[tokio::test]
    async fn what_is_not_a_completed_answer_is_each_lookups_own() {
        let flights = Flights::default();
        let leading = lead(&flights, "k", 0);
        let waiting = join(&flights, "k", 0);
        let in_flight: Read = Ok((
            Reservation::InFlight {
                lease_expires_at: SystemTime::now(),
            },
            None,
        ));
        leading.land(Outcome::of(&in_flight, "fp"));
        let told = waiting.outcome().await.expect("an outcome");
        assert!(told.answer_for("fp").is_none());

        let leading = lead(&flights, "k", 0);
        let waiting = join(&flights, "k", 0);
        drop(leading);
        assert!(waiting.outcome().await.is_none(), "its lookup went away");
        assert_eq!(flights.running(), 0);

        let body = Bytes::from_static(b"{}");
        let Ok((reservation, Some(mut kept))) = completed(&body) else {
            unreachable!()
        };
        kept.expires_here = SystemTime::now() - Duration::from_secs(1);
        let expired = Outcome::of(&Ok((reservation, Some(kept))), "fp");
        assert!(expired.answer_for("fp").is_none());
    }

    /// A purge (a new generation) is not joined across: a lookup after it
    /// reads again, and the earlier read, ending, leaves the later one
    /// running for its waiters.
    #[tokio::test]
    async fn a_lookup_after_a_purge_does_not_wait_for_a_read_from_before_it() {
        let flights = Flights::default();
        let before = lead(&flights, "k", 0);
        let after = lead(&flights, "k", 1);
        let waiting = join(&flights, "k", 1);
        before.land(Outcome::Own);
        assert_eq!(flights.running(), 1, "the later read still runs");
        let body = Bytes::from_static(b"{}");
        after.land(Outcome::of(&completed(&body), "fp"));
        let told = waiting.outcome().await.expect("an outcome");
        assert!(told.answer_for("fp").is_some());
    }
}

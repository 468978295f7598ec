//! Turning rows into store types, and store types into parameters.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio_postgres::Row;

use super::pool::db_error;
use crate::store::Damaged;
use crate::store::{
    Kept, Lease, RecordId, RecordInfo, RecordState, Reservation, StoreError, StoredResponse,
};

/// Longest lease or retention sent to the database (100 years): far beyond
/// any sane policy, far below where `interval` arithmetic overflows.
const MAX_MS: i64 = 100 * 365 * 24 * 3600 * 1000;

pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).min(MAX_MS)
}

/// For a replay, by the database's clock: how long the answer stays
/// replayable (cache TTL), how long ago it was completed, and the expiry as
/// written (told to clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptFor {
    pub remaining: Duration,
    pub age: Duration,
    pub expires_at: SystemTime,
}

impl KeptFor {
    /// For the layers above: copies are bounded by this process's clock.
    pub fn kept(self) -> Kept {
        Kept {
            expires_at: self.expires_at,
            expires_here: SystemTime::now() + self.remaining,
            age: Some(self.age),
        }
    }
}

/// What a completion wrote beside the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The record's fingerprint, which a cache in front stores with the answer.
    pub fingerprint: String,
    /// The expiry written (`Store::complete`).
    pub expires_at: SystemTime,
}

/// A row of `COMPLETE`, `COMPLETE_MANY` or `COMPLETED_BY`.
pub fn recorded(row: &Row) -> Result<Recorded, StoreError> {
    let expires_at: Option<SystemTime> = row.try_get("expires_at").map_err(db_error)?;
    Ok(Recorded {
        fingerprint: row.try_get("fingerprint").map_err(db_error)?,
        expires_at: expires_at.ok_or_else(|| corrupt("expires_at"))?,
    })
}

/// What one run of `RESERVE` decided.
pub enum Decided {
    Done {
        reservation: Reservation,
        kept: Option<KeptFor>,
    },
    /// The snapshot did not show the row the key conflicted with, or showed a
    /// version that is no longer the latest: run the statement again.
    Retry,
}

pub fn decide(id: &RecordId, rows: &[Row]) -> Result<Decided, StoreError> {
    let Some(row) = rows.first() else {
        return Ok(Decided::Retry);
    };
    let reserved: bool = row.try_get("reserved").map_err(db_error)?;
    if reserved {
        let expires_at = row.try_get("lease_expires_at").map_err(db_error)?;
        let lease = Lease {
            id: id.clone(),
            token: row.try_get("token").map_err(db_error)?,
            expires_at,
            // The store puts its own clock's in (`reserve_with_ttl`).
            expires_here: expires_at,
            row: None,
        };
        return Ok(Decided::Done {
            reservation: Reservation::Reserved(lease),
            kept: None,
        });
    }
    let live: bool = row.try_get("live").map_err(db_error)?;
    let same: bool = row.try_get("same").map_err(db_error)?;
    let state: i16 = row.try_get("state").map_err(db_error)?;
    let done = |reservation, kept| Ok(Decided::Done { reservation, kept });
    // In flight under another fingerprint refuses this request, its lease
    // live or not (`RESERVE`'s takeover rule); any other row not live left
    // the key free at the snapshot: not decided by this run.
    if !same && (live || state == 0) {
        return done(Reservation::Mismatch, None);
    }
    if !live {
        return Ok(Decided::Retry);
    }
    if state == 0 {
        let lease_expires_at: Option<SystemTime> =
            row.try_get("lease_expires_at").map_err(db_error)?;
        let lease_expires_at = lease_expires_at.ok_or_else(|| corrupt("lease_expires_at"))?;
        // Made by an earlier run of this reservation, whose answer was lost
        // (`unanswered`): the key is this reservation's.
        let mine: Option<bool> = row.try_get("mine").map_err(db_error)?;
        if mine == Some(true) {
            let lease = Lease {
                id: id.clone(),
                token: row.try_get("token").map_err(db_error)?,
                expires_at: lease_expires_at,
                expires_here: lease_expires_at,
                row: None,
            };
            return done(Reservation::Reserved(lease), None);
        }
        return done(Reservation::InFlight { lease_expires_at }, None);
    }
    let ms = |column: &str| -> Result<Option<Duration>, StoreError> {
        let ms: Option<i64> = row.try_get(column).map_err(db_error)?;
        Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    };
    let expires_at: Option<SystemTime> = row.try_get("expires_at").map_err(db_error)?;
    let kept = match (ms("remaining_ms")?, ms("age_ms")?, expires_at) {
        (Some(remaining), Some(age), Some(expires_at)) => Some(KeptFor {
            remaining,
            age,
            expires_at,
        }),
        _ => None,
    };
    done(Reservation::Completed(response(row)?), kept)
}

fn response(row: &Row) -> Result<StoredResponse, StoreError> {
    let status: Option<i32> = row.try_get("status").map_err(db_error)?;
    let status = status
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| corrupt("status"))?;
    let names: Option<Vec<String>> = row.try_get("header_names").map_err(db_error)?;
    let values: Option<Vec<Vec<u8>>> = row.try_get("header_values").map_err(db_error)?;
    let (names, values) = (names.unwrap_or_default(), values.unwrap_or_default());
    if names.len() != values.len() {
        return Err(corrupt("headers"));
    }
    let body: Option<Vec<u8>> = row.try_get("body").map_err(db_error)?;
    let body_omitted: Option<bool> = row.try_get("body_omitted").map_err(db_error)?;
    let outcome_unknown: Option<bool> = row.try_get("outcome_unknown").map_err(db_error)?;
    Ok(StoredResponse {
        status,
        headers: StoredResponse::header_list(names.into_iter().zip(values)),
        body: Bytes::from(body.unwrap_or_default()),
        body_omitted: body_omitted.unwrap_or(false),
        outcome_unknown: outcome_unknown.unwrap_or(false),
    })
}

/// Header pairs as the two parallel arrays the table keeps.
pub fn header_arrays(response: &StoredResponse) -> (Vec<&str>, Vec<&[u8]>) {
    response
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), &value[..]))
        .unzip()
}

pub fn record_info(row: &Row) -> Result<RecordInfo, StoreError> {
    let state: i16 = row.try_get("state").map_err(db_error)?;
    let status: Option<i32> = row.try_get("status").map_err(db_error)?;
    Ok(RecordInfo {
        scope: row.try_get("scope").map_err(db_error)?,
        state: record_state(state, row.try_get("outcome_unknown").map_err(db_error)?),
        fingerprint: row.try_get("fingerprint").map_err(db_error)?,
        status: status.and_then(|s| u16::try_from(s).ok()),
        created_at: row.try_get("created_at").map_err(db_error)?,
        completed_at: row.try_get("completed_at").map_err(db_error)?,
        expires_at: row.try_get("expires_at").map_err(db_error)?,
        lease_expires_at: row.try_get("lease_expires_at").map_err(db_error)?,
    })
}

/// A row's state as operators see it.
pub fn record_state(state: i16, outcome_unknown: bool) -> RecordState {
    match (state == 1, outcome_unknown) {
        (false, _) => RecordState::InFlight,
        (true, false) => RecordState::Completed,
        (true, true) => RecordState::OutcomeUnknown,
    }
}

fn corrupt(column: &'static str) -> StoreError {
    Damaged { part: column }.into()
}

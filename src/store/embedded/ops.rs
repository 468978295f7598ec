//! The state machine in SQL. Every function runs inside the writer thread's
//! batch transaction, so its read-then-write is atomic: nothing else writes
//! between the SELECT and the UPDATE. Each makes at most one writing
//! statement (see `writer`), except `sweep`, whose batch fails as a whole
//! should a later one of its statements fail after an earlier wrote.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use rusqlite::{OptionalExtension, Statement, params};

use super::codec::{decode_headers, duration_ms, encode_headers, from_ms};
use super::db_error::db;
use super::schema::{COMPLETED, IN_FLIGHT};
use super::txn::Txn;
use crate::store::Damaged;
use crate::store::{
    Kept, Lease, RecordId, RecordInfo, RecordState, Reservation, StoreError, StoredResponse,
};

struct Existing {
    row: i64,
    state: i64,
    fingerprint: String,
    token: i64,
    expires_at: Option<i64>,
    lease_expires_at: Option<i64>,
}

pub(super) fn reserve(
    txn: &mut Txn<'_, '_>,
    id: &RecordId,
    fingerprint: &str,
    lease_for: Duration,
) -> Result<(Reservation, Option<Kept>), StoreError> {
    let now = txn.now;
    // Insert first: a new key, the common case, is this one statement. On a
    // conflict nothing is written and the row decides below.
    let token = txn.next_token()?;
    let lease_expires_at = now.saturating_add(duration_ms(lease_for));
    let inserted = write_in_flight(
        txn,
        INSERT_IN_FLIGHT,
        id,
        fingerprint,
        token,
        lease_expires_at,
    )?;
    if inserted == 1 {
        txn.spend_token(token);
        txn.hold_lease(token, lease_for);
        let row = txn.last_insert_rowid();
        return Ok((lease(id, token, lease_expires_at, row), None));
    }

    let row = txn
        .statement(
            "SELECT rowid, state, fingerprint, token, expires_at, lease_expires_at
             FROM records WHERE route = ?1 AND scope = ?2 AND key = ?3",
        )?
        .query_row(params![id.route, id.scope, id.key], |row| {
            Ok(Existing {
                row: row.get(0)?,
                state: row.get(1)?,
                fingerprint: row.get(2)?,
                token: row.get(3)?,
                expires_at: row.get(4)?,
                lease_expires_at: row.get(5)?,
            })
        })
        .optional()
        .map_err(db)?
        // The batch holds the write lock: what conflicted is still there.
        .ok_or_else(|| StoreError::invariant("the conflicting record vanished"))?;

    let same = row.fingerprint == fingerprint;
    if row.state == COMPLETED {
        // A missing expiry is read as already expired: the row cannot replay.
        if row.expires_at.is_none_or(|at| at <= now) {
            return take_over(txn, id, fingerprint, (token, lease_for), row.row);
        }
        if !same {
            return Ok((Reservation::Mismatch, None));
        }
        let expires_at = row.expires_at.map(from_ms);
        return load_response(txn, id, row.token).map(|(response, completed_at)| {
            // The age by the store's clock, the one that wrote `completed_at`.
            let age =
                completed_at.map(|at| Duration::from_millis(now.saturating_sub(at).max(0) as u64));
            let kept = expires_at.map(|expires_at| Kept {
                expires_at,
                expires_here: expires_at,
                age,
            });
            (Reservation::Completed(response), kept)
        });
    }
    let held_until = match row.lease_expires_at {
        Some(at) if at > now => Some(at),
        // Ended by the wall clock, yet its request still runs here: the
        // clock stepped (`live_leases`).
        _ => txn
            .lease_held_here(row.token)
            .map(|left| now.saturating_add(duration_ms(left))),
    };
    match held_until {
        // Another request under the key, whether its holder still runs it
        // or died (having perhaps run it): one key never runs two requests.
        _ if !same => Ok((Reservation::Mismatch, None)),
        Some(at) => Ok((
            Reservation::InFlight {
                lease_expires_at: from_ms(at),
            },
            None,
        )),
        // The holder died or hung: the same request takes the key over
        // under the new token.
        None => take_over(txn, id, fingerprint, (token, lease_for), row.row),
    }
}

fn lease(id: &RecordId, token: i64, lease_expires_at: i64, row: i64) -> Reservation {
    Reservation::Reserved(Lease {
        id: id.clone(),
        token,
        expires_at: from_ms(lease_expires_at),
        expires_here: from_ms(lease_expires_at),
        row: Some(row),
    })
}

/// A new key's row. On a conflict (the key has a row) nothing is written.
const INSERT_IN_FLIGHT: &str = "INSERT INTO records (route, scope, key, state, fingerprint,
         token, body_omitted, created_at, lease_expires_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)
     ON CONFLICT DO NOTHING";

/// An existing row (completed past its retention, or in flight under the
/// same fingerprint with its holder gone) made a fresh in-flight record.
const TAKE_OVER: &str = "UPDATE records SET state = ?4, fingerprint = ?5, token = ?6,
         status = NULL, headers = NULL, body = NULL, body_omitted = 0, created_at = ?7,
         completed_at = NULL, expires_at = NULL, lease_expires_at = ?8, outcome_unknown = 0
     WHERE route = ?1 AND scope = ?2 AND key = ?3";

fn take_over(
    txn: &mut Txn<'_, '_>,
    id: &RecordId,
    fingerprint: &str,
    (token, lease_for): (i64, Duration),
    row: i64,
) -> Result<(Reservation, Option<Kept>), StoreError> {
    let lease_expires_at = txn.now.saturating_add(duration_ms(lease_for));
    write_in_flight(txn, TAKE_OVER, id, fingerprint, token, lease_expires_at)?;
    txn.spend_token(token);
    txn.hold_lease(token, lease_for);
    Ok((lease(id, token, lease_expires_at, row), None))
}

/// Runs `INSERT_IN_FLIGHT` or `TAKE_OVER`; returns the rows written.
fn write_in_flight(
    txn: &mut Txn<'_, '_>,
    sql: &'static str,
    id: &RecordId,
    fingerprint: &str,
    token: i64,
    lease_expires_at: i64,
) -> Result<usize, StoreError> {
    let now = txn.now;
    txn.statement(sql)?
        .execute(params![
            id.route,
            id.scope,
            id.key,
            IN_FLIGHT,
            fingerprint,
            token,
            now,
            lease_expires_at
        ])
        .map_err(db)
}

fn load_response(
    txn: &mut Txn<'_, '_>,
    id: &RecordId,
    token: i64,
) -> Result<(StoredResponse, Option<i64>), StoreError> {
    let (status, headers, body, body_omitted, outcome_unknown, completed_at) = txn
        .statement(
            "SELECT status, headers, body, body_omitted, outcome_unknown, completed_at
             FROM records WHERE route = ?1 AND scope = ?2 AND key = ?3 AND token = ?4",
        )?
        .query_row(params![id.route, id.scope, id.key, token], |row| {
            Ok((
                row.get::<_, Option<i64>>(0)?,
                row.get::<_, Option<Vec<u8>>>(1)?,
                row.get::<_, Option<Vec<u8>>>(2)?,
                row.get::<_, bool>(3)?,
                row.get::<_, bool>(4)?,
                row.get::<_, Option<i64>>(5)?,
            ))
        })
        .map_err(db)?;
    let status = status
        .and_then(|s| u16::try_from(s).ok())
        .ok_or(Damaged { part: "status" })?;
    let response = StoredResponse {
        status,
        headers: decode_headers(headers.as_deref().unwrap_or(&[0, 0, 0, 0]))?.into(),
        body: Bytes::from(body.unwrap_or_default()),
        body_omitted,
        outcome_unknown,
    };
    Ok((response, completed_at))
}

/// A statement's two forms for `on_lease_row`: the lease's row by rowid,
/// and by key; both fenced by the token (?1) and the in-flight state (?2).
macro_rules! by_row_then_key {
    ($head:literal) => {
        [
            concat!($head, " WHERE rowid = ?10 AND token = ?1 AND state = ?2"),
            concat!(
                $head,
                " WHERE route = ?10 AND scope = ?11 AND key = ?12 AND token = ?1 AND state = ?2"
            ),
        ]
    };
}

/// A lease's row found by its rowid (`Lease::row`), or by its key when the
/// lease has none or the rowid no longer holds it (an operator's `VACUUM`
/// renumbers rows). Either way `token` decides: tokens are unique across
/// the store, so a row with the lease's token is the lease's row.
///
/// By rowid, a completion or release skips a descent of the primary key's
/// index (comparing route, key and scope strings at every level): ~3% of
/// a new key's instructions (docs/adr/0004-embedded-store.md).
///
/// No `RETURNING`: SQLite runs it through an ephemeral table and a statement
/// journal, which makes this statement cost twice the reservation's insert.
/// The outcome-unknown mark is ?13, past the parameters of both forms.
const COMPLETE: [&str; 2] = by_row_then_key!(
    "UPDATE records SET state = ?3, status = ?4, headers = ?5, body = ?6,
         body_omitted = ?7, completed_at = ?8, expires_at = ?9, lease_expires_at = NULL,
         outcome_unknown = ?13"
);
const RELEASE: [&str; 2] = by_row_then_key!("DELETE FROM records");

pub(super) fn complete(
    txn: &mut Txn<'_, '_>,
    lease: &Lease,
    response: &StoredResponse,
    retain_for: Duration,
) -> Result<SystemTime, StoreError> {
    let now = txn.now;
    let expires_at = now.saturating_add(duration_ms(retain_for));
    let headers = encode_headers(&response.headers);
    let answer = |stmt: &mut Statement<'_>| -> rusqlite::Result<()> {
        stmt.raw_bind_parameter(3, COMPLETED)?;
        stmt.raw_bind_parameter(4, i64::from(response.status))?;
        stmt.raw_bind_parameter(5, &headers)?;
        stmt.raw_bind_parameter(6, response.body.as_ref())?;
        stmt.raw_bind_parameter(7, response.body_omitted)?;
        stmt.raw_bind_parameter(8, now)?;
        stmt.raw_bind_parameter(9, expires_at)?;
        stmt.raw_bind_parameter(13, response.outcome_unknown)
    };
    let updated = on_lease_row(txn, lease, COMPLETE, answer)?;
    txn.end_lease(lease.token);
    // No row: the token is no longer the record's (taken over or purged).
    if updated == 0 {
        return Err(StoreError::Fenced);
    }
    Ok(from_ms(expires_at))
}

pub(super) fn release(txn: &mut Txn<'_, '_>, lease: &Lease) -> Result<(), StoreError> {
    on_lease_row(txn, lease, RELEASE, |_| Ok(()))?;
    txn.end_lease(lease.token);
    Ok(())
}

/// Runs `by_row` (when the lease knows its row), then `by_key` if that
/// changed nothing; returns the rows changed. Both take the token as ?1 and
/// the in-flight state as ?2, `bind` their ?3 to ?9, and the rowid or the
/// key (route, scope, key) from ?10.
fn on_lease_row(
    txn: &mut Txn<'_, '_>,
    lease: &Lease,
    [by_row, by_key]: [&'static str; 2],
    bind: impl Fn(&mut Statement<'_>) -> rusqlite::Result<()>,
) -> Result<usize, StoreError> {
    let id = &lease.id;
    let common = |stmt: &mut Statement<'_>| -> rusqlite::Result<()> {
        stmt.raw_bind_parameter(1, lease.token)?;
        stmt.raw_bind_parameter(2, IN_FLIGHT)?;
        bind(stmt)
    };
    if let Some(row) = lease.row {
        let mut stmt = txn.statement(by_row)?;
        common(&mut stmt).map_err(db)?;
        stmt.raw_bind_parameter(10, row).map_err(db)?;
        let changed = stmt.raw_execute().map_err(db)?;
        if changed > 0 {
            return Ok(changed);
        }
    }
    let mut stmt = txn.statement(by_key)?;
    common(&mut stmt).map_err(db)?;
    stmt.raw_bind_parameter(10, &*id.route).map_err(db)?;
    stmt.raw_bind_parameter(11, &*id.scope).map_err(db)?;
    stmt.raw_bind_parameter(12, &*id.key).map_err(db)?;
    stmt.raw_execute().map_err(db)
}

pub(super) fn records(
    txn: &mut Txn<'_, '_>,
    route: &str,
    key: &str,
) -> Result<Vec<RecordInfo>, StoreError> {
    let mut stmt = txn.statement(
        "SELECT scope, state, fingerprint, status, created_at, completed_at,
             expires_at, lease_expires_at, outcome_unknown
         FROM records WHERE route = ?1 AND key = ?2 ORDER BY scope",
    )?;
    let rows = stmt
        .query_map(params![route, key], |row| {
            let state: i64 = row.get(1)?;
            let status: Option<i64> = row.get(3)?;
            Ok(RecordInfo {
                scope: row.get(0)?,
                state: record_state(state, row.get(8)?),
                fingerprint: row.get(2)?,
                status: status.and_then(|s| u16::try_from(s).ok()),
                created_at: from_ms(row.get(4)?),
                completed_at: row.get::<_, Option<i64>>(5)?.map(from_ms),
                expires_at: row.get::<_, Option<i64>>(6)?.map(from_ms),
                lease_expires_at: row.get::<_, Option<i64>>(7)?.map(from_ms),
            })
        })
        .map_err(db)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db)
}

pub(super) fn purge(txn: &mut Txn<'_, '_>, route: &str, key: &str) -> Result<u64, StoreError> {
    let n = txn
        .statement("DELETE FROM records WHERE route = ?1 AND key = ?2")?
        .execute(params![route, key])
        .map_err(db)?;
    Ok(n as u64)
}

/// Deletes expired answers and, when `dead_leases`, in-flight records whose
/// holder is gone.
pub(super) fn sweep(
    txn: &mut Txn<'_, '_>,
    batch: u32,
    dead_leases: bool,
) -> Result<u64, StoreError> {
    let now = txn.now;
    let completed = txn
        .statement(
            "DELETE FROM records WHERE rowid IN (
                 SELECT rowid FROM records
                 WHERE expires_at <= ?1 AND state = ?2 LIMIT ?3)",
        )?
        .execute(params![now, COMPLETED, i64::from(batch)])
        .map_err(db)?;
    let room = i64::from(batch).saturating_sub(completed as i64);
    if room == 0 || !dead_leases {
        return Ok(completed as u64);
    }
    // A lease that ran out without an answer (its gateway died) is taken
    // over by the same request only; any other is refused while the record
    // stays. Left in place, such a record would stay for good when the key
    // never comes back, and refuse every other request under it. Found per
    // route through the listing index's in-flight range (one descent per
    // route, as `count` does), never a scan of the table; a lease this
    // process still holds (`live_leases`) is no dead one.
    let ended = txn
        .statement(concat!(
            super::schema::with_routes!(),
            "SELECT r.rowid, r.token FROM routes
             JOIN records r INDEXED BY records_listing
               ON r.route = routes.route AND r.state = ?2
             WHERE r.lease_expires_at <= ?1
             LIMIT ?3",
        ))?
        .query_map(params![now, IN_FLIGHT, room], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
        })
        .map_err(db)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(db)?;
    let mut dead = 0;
    for (row, token) in ended {
        if txn.lease_held_here(token).is_none() {
            dead += txn
                .statement("DELETE FROM records WHERE rowid = ?1 AND token = ?2")?
                .execute(params![row, token])
                .map_err(db)?;
        }
    }
    Ok((completed + dead) as u64)
}

/// Reads both tables, not a constant: a file damaged under the gateway
/// (overwritten in place) fails every operation with "malformed", and
/// `/readyz` should say so. One page of each; nothing written.
pub(super) fn ping(txn: &mut Txn<'_, '_>) -> Result<(), StoreError> {
    txn.statement(
        "SELECT (SELECT value FROM meta WHERE name = 'last_token'),
                (SELECT count(*) FROM (SELECT 1 FROM records LIMIT 1))",
    )?
    .query_row([], |row| row.get::<_, Option<i64>>(0))
    .map_err(db)?;
    Ok(())
}

/// A row's state as operators see it.
pub(super) fn record_state(state: i64, outcome_unknown: bool) -> RecordState {
    match (state == COMPLETED, outcome_unknown) {
        (false, _) => RecordState::InFlight,
        (true, false) => RecordState::Completed,
        (true, true) => RecordState::OutcomeUnknown,
    }
}

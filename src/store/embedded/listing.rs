//! Listing and counting records for operators, through the `records_listing`
//! index (route, state, outcome_unknown, created_at, key, scope, expires_at):
//! a page is one range of it per state, never a scan of the table. The
//! count is `count`'s.

use rusqlite::params;

use super::codec::from_ms;
use super::db_error::db;
use super::ops::record_state;
use super::schema::{COMPLETED, IN_FLIGHT};
use super::txn::Txn;
use crate::store::listing::{ListQuery, Listed, Page};
use crate::store::{RecordState, StoreError};

/// One state's records after the cursor, oldest first. Rows past their
/// retention or lease (awaiting the sweep) are skipped: they no longer
/// replay or hold the key. An in-flight record's expiry is its lease's.
const PAGE: &str = "
SELECT key, scope, state, outcome_unknown, status, created_at, completed_at,
       CASE state WHEN 0 THEN lease_expires_at ELSE expires_at END
FROM records INDEXED BY records_listing
WHERE route = ?1 AND state = ?2 AND outcome_unknown = ?3
  AND (CASE state WHEN 0 THEN lease_expires_at ELSE expires_at END) > ?4
  AND (created_at, key, scope) > (?5, ?6, ?7)
ORDER BY created_at, key, scope
LIMIT ?8";

fn columns(state: RecordState) -> (i64, bool) {
    match state {
        RecordState::InFlight => (IN_FLIGHT, false),
        RecordState::Completed => (COMPLETED, false),
        RecordState::OutcomeUnknown => (COMPLETED, true),
    }
}

pub(super) fn list(txn: &mut Txn<'_, '_>, query: &ListQuery) -> Result<Page, StoreError> {
    let states: &[RecordState] = match &query.state {
        Some(state) => std::slice::from_ref(state),
        None => &RecordState::ALL,
    };
    // Every state's next `limit + 1` rows, merged: the extra row says
    // whether a next page exists.
    let mut rows = Vec::new();
    for &state in states {
        rows.extend(one_state(txn, query, state)?);
    }
    rows.sort_by(|a, b| order(a).cmp(&order(b)));
    Ok(Page::from_rows(rows, query.limit))
}

fn order(record: &Listed) -> (std::time::SystemTime, &str, &str) {
    (record.created_at, &record.key, &record.scope)
}

fn one_state(
    txn: &mut Txn<'_, '_>,
    query: &ListQuery,
    state: RecordState,
) -> Result<Vec<Listed>, StoreError> {
    let now = txn.now;
    let (state, outcome_unknown) = columns(state);
    // No cursor: before every row (created_at is never negative).
    let (after_ms, after_key, after_scope) = match &query.after {
        Some(cursor) => (
            cursor.created_at_us.div_euclid(1000),
            cursor.key.as_str(),
            cursor.scope.as_str(),
        ),
        None => (-1, "", ""),
    };
    let mut stmt = txn.statement(PAGE)?;
    let rows = stmt
        .query_map(
            params![
                query.route,
                state,
                outcome_unknown,
                now,
                after_ms,
                after_key,
                after_scope,
                i64::from(query.limit) + 1
            ],
            |row| {
                let status: Option<i64> = row.get(4)?;
                Ok(Listed {
                    key: row.get(0)?,
                    scope: row.get(1)?,
                    state: record_state(row.get(2)?, row.get(3)?),
                    status: status.and_then(|s| u16::try_from(s).ok()),
                    created_at: from_ms(row.get(5)?),
                    completed_at: row.get::<_, Option<i64>>(6)?.map(from_ms),
                    expires_at: row.get::<_, Option<i64>>(7)?.map(from_ms),
                })
            },
        )
        .map_err(db)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_to_distinct_columns() {
        let all: std::collections::HashSet<_> = RecordState::ALL.into_iter().map(columns).collect();
        assert_eq!(all.len(), 3);
        for state in RecordState::ALL {
            let (s, unknown) = columns(state);
            assert_eq!(record_state(s, unknown), state);
        }
    }
}

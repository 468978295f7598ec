//! `/readyz`'s one statement: whether the records table is there (it must
//! exist, in the search_path, and be readable), whether the session takes
//! writes, and which privileges the role lacks, in one round trip.

use tokio_postgres::Row;

use super::privileges::missing;

/// Planned against the records table, never reads a row: a bare `SELECT 1`
/// would say ready over a schema that was dropped or never migrated, where
/// every keyed request fails. Its first row says whether the session takes
/// writes (not a standby, not `default_transaction_read_only`); its rows
/// name the privileges the role lacks (`privileges::refuse`), none when
/// their `object` is NULL.
pub(super) const READY: &str = concat!(
    "
SELECT current_setting('transaction_read_only') = 'on' AS read_only,
       missing.object, missing.kind, missing.privileges, missing.role
FROM (SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM idemgate_records WHERE false)) AS planned
LEFT JOIN (",
    missing!(),
    "
) AS missing ON true
ORDER BY missing.n"
);

/// Whether [`READY`] found the session read-only.
pub(super) fn read_only(rows: &[Row]) -> bool {
    rows.first()
        .and_then(|row| row.try_get::<_, bool>("read_only").ok())
        == Some(true)
}

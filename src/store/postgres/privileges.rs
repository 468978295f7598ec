//! The privileges a serving role needs on the store's objects, checked
//! where a missing one would otherwise fail every keyed request without a
//! word of why: at `serve`'s start, and by `/readyz` (a `REVOKE` while
//! serving). A role that owns nothing (the tables made by another role,
//! `idemgate migrate` run by their owner) has only what was granted: what
//! is missing is said as the `GRANT` that gives it. The commands are not
//! held to it: an operator's read-only role may show and list keys.

use tokio_postgres::Row;

use super::cause::PostgresCause;
use super::grant::Grant;
use super::pool::db_error;
use crate::store::StoreError;

/// What every path of a serving gateway runs: reservations and completions
/// (`SELECT`, `INSERT`, `UPDATE` and the token sequence), releases, purges
/// and the sweep (`DELETE`), and the schema's version and the store's
/// identity at start (`SELECT` on the ledger). `LISTEN`/`NOTIFY` and the
/// migration's advisory lock need no grant. An object that does not exist
/// is not reported here: the schema check and `/readyz` say so.
pub(super) const MISSING: &str = "
SELECT quote_ident(current_schema()) || '.' || needed.object, needed.kind,
       string_agg(needed.privilege, ', ' ORDER BY needed.n), quote_ident(current_user)
FROM (VALUES
    (1, 'TABLE', 'idemgate_schema_migrations', 'SELECT'),
    (2, 'TABLE', 'idemgate_records', 'SELECT'),
    (3, 'TABLE', 'idemgate_records', 'INSERT'),
    (4, 'TABLE', 'idemgate_records', 'UPDATE'),
    (5, 'TABLE', 'idemgate_records', 'DELETE'),
    (6, 'SEQUENCE', 'idemgate_tokens', 'USAGE')
) AS needed(n, kind, object, privilege)
WHERE NOT CASE needed.kind
    WHEN 'TABLE' THEN has_table_privilege(to_regclass(needed.object)::oid, needed.privilege)
    ELSE has_sequence_privilege(to_regclass(needed.object)::oid, needed.privilege)
END
GROUP BY needed.object, needed.kind
ORDER BY min(needed.n)";

/// Refuses a role that lacks any privilege a serving gateway needs, with
/// the statements that grant them: `rows` are what [`MISSING`] found.
pub(super) fn refuse(rows: &[Row]) -> Result<(), StoreError> {
    let mut grants = Vec::with_capacity(rows.len());
    let mut role = String::new();
    for row in rows {
        grants.push(Grant {
            object: row.try_get(0).map_err(db_error)?,
            kind: row.try_get(1).map_err(db_error)?,
            privileges: row.try_get(2).map_err(db_error)?,
        });
        role = row.try_get(3).map_err(db_error)?;
    }
    if grants.is_empty() {
        return Ok(());
    }
    Err(PostgresCause::MissingGrants { role, grants }.into())
}

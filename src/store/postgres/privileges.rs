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
/// is not reported here: the schema check and `/readyz` say so. A row per
/// object lacking a privilege, `n` ordering them; a macro, so that
/// `/readyz`'s statement (`ready`) holds it too.
macro_rules! missing {
    () => {
        "
SELECT quote_ident(current_schema()) || '.' || needed.object AS object, needed.kind AS kind,
       string_agg(needed.privilege, ', ' ORDER BY needed.n) AS privileges,
       quote_ident(current_user) AS role, min(needed.n) AS n
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
GROUP BY needed.object, needed.kind"
    };
}
pub(super) use missing;

/// The privileges the role lacks, in [`missing`]'s order.
pub(super) const MISSING: &str = concat!(missing!(), "\nORDER BY n");

/// Refuses a role that lacks any privilege a serving gateway needs, with
/// the statements that grant them: `rows` are what [`missing`] found, by
/// its columns' names; a row without an object names none.
pub(super) fn refuse(rows: &[Row]) -> Result<(), StoreError> {
    let mut grants = Vec::with_capacity(rows.len());
    let mut role = String::new();
    for row in rows {
        let Some(object) = row
            .try_get::<_, Option<String>>("object")
            .map_err(db_error)?
        else {
            continue;
        };
        grants.push(Grant {
            object,
            kind: row.try_get("kind").map_err(db_error)?,
            privileges: row.try_get("privileges").map_err(db_error)?,
        });
        role = row.try_get("role").map_err(db_error)?;
    }
    if grants.is_empty() {
        return Ok(());
    }
    Err(PostgresCause::MissingGrants { role, grants }.into())
}

//! Every statement the Postgres store runs. Each store operation is exactly one
//! of these, i.e. one round trip (reserve may repeat, see `RESERVE`); under
//! load, reservations and completions share one (`RESERVE_MANY`,
//! `COMPLETE_MANY`, see `batch`).
//!
//! All instants come from the database clock (`now()`, the statement's start
//! in autocommit), so replicas whose own clocks are skewed still agree on
//! which lease or retention has run out. `state` is 0 in flight, 1 completed.

/// The takeover rule both reservation statements share: a row may be taken
/// when it is completed past retention, or in flight with an expired lease
/// under the same fingerprint. Another request under a key whose holder
/// died is refused as while it lived: that holder may have run its own, and
/// one key never runs two requests. (A macro, so that `concat!` builds the
/// statements as literals.)
macro_rules! take_over {
    () => {
        "
    ON CONFLICT (route, key, scope) DO UPDATE SET
        state = 0, fingerprint = excluded.fingerprint, token = excluded.token,
        status = NULL, header_names = NULL, header_values = NULL, body = excluded.body,
        body_omitted = false, created_at = excluded.created_at, completed_at = NULL,
        expires_at = NULL, lease_expires_at = excluded.lease_expires_at,
        outcome_unknown = false
    WHERE (r.state = 1 AND coalesce(r.expires_at <= now(), true))
       OR (r.state = 0 AND coalesce(r.lease_expires_at <= now(), true)
           AND r.fingerprint = excluded.fingerprint)
"
    };
}

/// Insert-first reservation, decided by the primary key.
///
/// - No row: the INSERT wins (`reserved = true`).
/// - A row that may be taken (completed past retention, or in flight with an
///   expired lease and this fingerprint): `ON CONFLICT DO UPDATE` rewrites it
///   under a fresh token, atomically with the check, on the row's latest
///   committed version.
/// - A row that may not: the update's WHERE fails, `taken` is empty and the
///   second branch returns the row so the caller learns InFlight / Completed
///   / Mismatch in the same round trip; the body is sent only on a
///   fingerprint match (a mismatch never needs it). A row in flight under
///   another fingerprint is a mismatch whether its lease is live or not.
///
/// The second branch reads the statement's snapshot, which predates a row a
/// concurrent transaction committed while this one waited on the key: it then
/// returns nothing, or a version the key was free in (not live, and not in
/// flight under another fingerprint), and the caller runs the statement
/// again; the next snapshot sees the committed row. A version in flight
/// under another fingerprint decides the mismatch even when it is no longer
/// the latest, as a live one does: the key was not this request's at the
/// snapshot's instant.
///
/// **The claim.** Until an answer replaces it, an in-flight record's `body`
/// holds the claim of the reservation that wrote it (`$6`, 16 random bytes,
/// see `unanswered`); a takeover writes its own. `mine`: the row is in
/// flight under this reservation's claim, so an earlier run of it committed
/// and its answer was lost. The body, not a column of its own, so that no
/// migration is needed and a takeover by an older binary (which writes
/// `body = NULL`) clears the claim: a claim only ever matches the record
/// the reservation that chose it wrote.
///
/// `$1 route, $2 scope, $3 key, $4 fingerprint, $5 lease in ms, $6 claim`.
pub const RESERVE: &str = concat!(
    "
WITH taken AS (
    INSERT INTO idemgate_records AS r
        (route, scope, key, state, fingerprint, token, body, body_omitted, created_at,
         lease_expires_at)
    VALUES ($1, $2, $3, 0, $4, nextval('idemgate_tokens'), $6, false, now(),
            now() + $5::bigint * interval '1 millisecond')",
    take_over!(),
    "    RETURNING r.token, r.lease_expires_at
)
SELECT true AS reserved, token, NULL::smallint AS state, NULL::boolean AS same,
       NULL::boolean AS live, lease_expires_at, NULL::bigint AS remaining_ms,
       NULL::integer AS status, NULL::text[] AS header_names,
       NULL::bytea[] AS header_values, NULL::bytea AS body, NULL::boolean AS body_omitted,
       NULL::bigint AS age_ms, NULL::boolean AS outcome_unknown,
       NULL::timestamptz AS expires_at, NULL::boolean AS mine
FROM taken
UNION ALL
SELECT false, r.token, r.state, r.fingerprint = $4,
       coalesce(CASE WHEN r.state = 1 THEN r.expires_at > now()
                     ELSE r.lease_expires_at > now() END, false),
       r.lease_expires_at,
       greatest(0, (extract(epoch FROM r.expires_at - now()) * 1000)::bigint),
       r.status,
       CASE WHEN r.fingerprint = $4 THEN r.header_names END,
       CASE WHEN r.fingerprint = $4 THEN r.header_values END,
       CASE WHEN r.fingerprint = $4 THEN r.body END,
       r.body_omitted,
       greatest(0, (extract(epoch FROM now() - r.completed_at) * 1000)::bigint),
       r.outcome_unknown, r.expires_at, coalesce(r.state = 0 AND r.body = $6, false)
FROM idemgate_records r
WHERE r.route = $1 AND r.scope = $2 AND r.key = $3 AND NOT EXISTS (SELECT 1 FROM taken)"
);

/// The answer and the completed state in one statement, fenced by the token:
/// a holder whose lease was taken over (new token) or whose row was released,
/// purged or swept updates nothing and learns it is fenced. Returns the
/// record's fingerprint, which a cache in front stores with the answer, and
/// the expiry written, which the first answer tells as replays will.
///
/// The expiry is kept to the millisecond, as the embedded store and the
/// Redis copy keep theirs: a replay from either tells the same instant.
///
/// `state + 0 = 0`, not `state = 0`, here and wherever a lease's row is
/// found: on a table whose statistics say few records are in flight (any
/// table autovacuum has analyzed), the planner otherwise reads the listing
/// index's range (route, state 0), which holds every in-flight record of the
/// route and, until a vacuum, the entries of every record completed since,
/// instead of the primary key's one entry. New keys then run 2-3 times slower
/// on a table of 100,000 analyzed records (`plans` checks the plan).
///
/// `$1 route, $2 scope, $3 key, $4 token, $5 status, $6 header names,
/// $7 header values, $8 body, $9 body omitted, $10 retention in ms,
/// $11 outcome unknown`.
pub const COMPLETE: &str = "
UPDATE idemgate_records SET
    state = 1, status = $5, header_names = $6, header_values = $7, body = $8,
    body_omitted = $9, completed_at = now(), outcome_unknown = $11,
    expires_at = date_trunc('milliseconds', now() + $10::bigint * interval '1 millisecond'),
    lease_expires_at = NULL
WHERE route = $1 AND scope = $2 AND key = $3 AND token = $4 AND state + 0 = 0
RETURNING fingerprint, expires_at";

/// `RESERVE` for several keys in one statement (see `batch`). The keys must be
/// distinct. They are inserted in key order, so two batches that share keys
/// lock them in the same order and never deadlock. Every row carries `n`, the
/// 1-based position of its key in the arrays; a key without a row (or with a
/// row that is not live) needs the single-key statement.
///
/// `$1 routes, $2 scopes, $3 keys, $4 fingerprints, $5 leases in ms,
/// $6 claims`.
pub const RESERVE_MANY: &str = concat!(
    "
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                         $6::bytea[])
        WITH ORDINALITY AS i(route, scope, key, fingerprint, lease_ms, claim, n)
),
taken AS (
    INSERT INTO idemgate_records AS r
        (route, scope, key, state, fingerprint, token, body, body_omitted, created_at,
         lease_expires_at)
    SELECT route, scope, key, 0, fingerprint, nextval('idemgate_tokens'), claim, false, now(),
           now() + lease_ms * interval '1 millisecond'
    FROM input ORDER BY route, key, scope",
    take_over!(),
    "    RETURNING r.route, r.scope, r.key, r.token, r.lease_expires_at
)
SELECT i.n, true AS reserved, t.token, NULL::smallint AS state, NULL::boolean AS same,
       NULL::boolean AS live, t.lease_expires_at, NULL::bigint AS remaining_ms,
       NULL::integer AS status, NULL::text[] AS header_names,
       NULL::bytea[] AS header_values, NULL::bytea AS body, NULL::boolean AS body_omitted,
       NULL::bigint AS age_ms, NULL::boolean AS outcome_unknown,
       NULL::timestamptz AS expires_at, NULL::boolean AS mine
FROM input i JOIN taken t ON t.route = i.route AND t.scope = i.scope AND t.key = i.key
UNION ALL
SELECT i.n, false, r.token, r.state, r.fingerprint = i.fingerprint,
       coalesce(CASE WHEN r.state = 1 THEN r.expires_at > now()
                     ELSE r.lease_expires_at > now() END, false),
       r.lease_expires_at,
       greatest(0, (extract(epoch FROM r.expires_at - now()) * 1000)::bigint),
       r.status,
       CASE WHEN r.fingerprint = i.fingerprint THEN r.header_names END,
       CASE WHEN r.fingerprint = i.fingerprint THEN r.header_values END,
       CASE WHEN r.fingerprint = i.fingerprint THEN r.body END,
       r.body_omitted,
       greatest(0, (extract(epoch FROM now() - r.completed_at) * 1000)::bigint),
       r.outcome_unknown, r.expires_at, coalesce(r.state = 0 AND r.body = i.claim, false)
FROM input i JOIN idemgate_records r ON r.route = i.route AND r.scope = i.scope AND r.key = i.key
WHERE NOT EXISTS (
    SELECT 1 FROM taken t WHERE t.route = i.route AND t.scope = i.scope AND t.key = i.key)"
);

/// `COMPLETE` for several leases in one statement (see `batch`), each fenced
/// by its own token. The rows are locked first, in key order — the order in
/// which `RESERVE_MANY` takes them — so a batch of completions and a batch of
/// reservations that share keys never wait on each other in a cycle (a
/// deadlock, which a 409 storm on the bench provokes, costs
/// `deadlock_timeout`).
/// Header pairs of all answers travel as two flat arrays; answer `n` owns the
/// slice `lo..=hi` of them (empty when `hi < lo`). Returns `n`, the
/// fingerprint and the expiry of every record completed; a lease without a
/// row was fenced. `state + 0` and the expiry's precision: see `COMPLETE`.
///
/// `$1 routes, $2 scopes, $3 keys, $4 tokens, $5 statuses, $6 all header names,
/// $7 all header values, $8 lo, $9 hi, $10 bodies, $11 bodies omitted,
/// $12 retentions in ms, $13 outcome unknown`.
pub const COMPLETE_MANY: &str = "
WITH b AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::integer[],
                         $8::integer[], $9::integer[], $10::bytea[], $11::boolean[], $12::bigint[],
                         $13::boolean[])
        WITH ORDINALITY AS b(route, scope, key, token, status, lo, hi, body, omitted, retain_ms,
                             unknown, n)
),
mine AS (
    SELECT r.ctid AS at, b.*
    FROM b JOIN idemgate_records r
      ON r.route = b.route AND r.scope = b.scope AND r.key = b.key AND r.token = b.token
     AND r.state + 0 = 0
    ORDER BY r.route, r.key, r.scope
    FOR UPDATE OF r
)
UPDATE idemgate_records AS r SET
    state = 1, status = m.status, header_names = ($6::text[])[m.lo:m.hi],
    header_values = ($7::bytea[])[m.lo:m.hi], body = m.body,
    body_omitted = m.omitted, completed_at = now(), outcome_unknown = m.unknown,
    expires_at = date_trunc('milliseconds', now() + m.retain_ms * interval '1 millisecond'),
    lease_expires_at = NULL
FROM mine m
WHERE r.ctid = m.at
RETURNING m.n, r.fingerprint, r.expires_at";

/// After a completion lost with its connection: did it commit? The record
/// still under this token and completed means yes.
pub const COMPLETED_BY: &str = "
SELECT fingerprint, expires_at FROM idemgate_records
WHERE route = $1 AND scope = $2 AND key = $3 AND token = $4 AND state = 1";

/// Frees the key only while this lease still holds it (no-op otherwise).
/// `state + 0`: see `COMPLETE`.
pub const RELEASE: &str = "
DELETE FROM idemgate_records
WHERE route = $1 AND scope = $2 AND key = $3 AND token = $4 AND state + 0 = 0";

/// Frees the key a reservation may have taken without hearing of it (its
/// answer lost, see `unanswered`): only the record in flight under its claim
/// (`RESERVE`), never another holder's. `state + 0`: see `COMPLETE`.
/// `$4 claim`.
pub const RELEASE_CLAIMED: &str = "
DELETE FROM idemgate_records
WHERE route = $1 AND scope = $2 AND key = $3 AND state + 0 = 0 AND body = $4";

pub const RECORDS: &str = "
SELECT scope, state, fingerprint, status, created_at, completed_at, expires_at, lease_expires_at,
       outcome_unknown
FROM idemgate_records WHERE route = $1 AND key = $2 ORDER BY scope";

/// Returns the scopes deleted, so a cache in front can drop them too, and
/// tells every replica (`purges`) when it commits, so they drop their
/// in-memory copies of the key's answers. The channel is database-wide: the
/// payload names the schema, and listeners of other schemas ignore it.
pub const PURGE: &str = "
WITH gone AS (
    DELETE FROM idemgate_records WHERE route = $1 AND key = $2 RETURNING scope
)
SELECT scope,
       pg_notify('idemgate_purge',
                 json_build_array(current_schema(), $1::text, $2::text)::text),
       pg_notify('idemgate_purge',
                 json_build_array(current_schema(), $1::text, $2::text, scope)::text)
FROM gone";

/// One bounded batch. `SKIP LOCKED`: replicas sweeping at once split the
/// backlog instead of queueing behind each other's row locks; a reservation
/// taking over an expired row holds its lock, so the sweep skips that row.
/// Run after `SWEEP_PLAN`, in the same transaction.
///
/// The sweep's batch must be a plain scan of the expiry index in expiry
/// order: it stops after the batch, and it marks the entries of rows earlier
/// batches deleted, so the next batch skips them. A bitmap scan, which the
/// planner picks when it expects few expired rows (no statistics yet, or
/// statistics from before a backlog built up), reads every expired entry and
/// every deleted row's page again per batch: a backlog of 300,000 records took
/// 46 s instead of 7 s, and one of a million ran a batch into
/// `statement_timeout` (bench/README.md, "At scale").
pub const SWEEP_PLAN: &str = "SET LOCAL enable_bitmapscan = off";

/// `$1 batch size`.
pub const SWEEP: &str = "
DELETE FROM idemgate_records WHERE ctid IN (
    SELECT ctid FROM idemgate_records
    WHERE state = 1 AND expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED)";

/// The start of a statement that reads every route of the table, one
/// descent of the primary key each (a loose index scan), as `routes`.
macro_rules! with_routes {
    () => {
        "
WITH RECURSIVE routes(route) AS (
    (SELECT route FROM idemgate_records ORDER BY route LIMIT 1)
    UNION ALL
    SELECT (SELECT r.route FROM idemgate_records r
            WHERE r.route > routes.route ORDER BY r.route LIMIT 1)
    FROM routes WHERE routes.route IS NOT NULL
)
"
    };
}
pub(super) use with_routes;

/// In-flight records whose lease ran out without an answer (their gateway
/// died): the same request takes the key over, any other is refused while
/// they stay, and left in place they would stay for good when the key never
/// comes back. Found
/// per route through the listing index's in-flight range (a loose index
/// scan over the routes, as the count does), never a scan of the table.
///
/// `$1 batch size`.
pub const SWEEP_DEAD_LEASES: &str = concat!(
    with_routes!(),
    "
DELETE FROM idemgate_records WHERE ctid IN (
    SELECT r.ctid FROM routes
    JOIN idemgate_records r ON r.route = routes.route AND r.state = 0
    WHERE r.lease_expires_at <= now()
    LIMIT $1
    FOR UPDATE OF r SKIP LOCKED)"
);

-- idemgate schema version 1: the records table and the fencing-token sequence.
-- Applied inside one transaction by `idemgate migrate` (or `serve` at start);
-- unqualified names land in the first schema of the connection's search_path.

-- Fencing tokens come from one sequence, never from the row: a row is deleted
-- on release, purge and sweep, and a per-row counter restarting at 1 would hand
-- a late holder's token to the next holder of the same key.
CREATE SEQUENCE idemgate_tokens AS bigint;

CREATE TABLE idemgate_records (
    route            text        NOT NULL,
    scope            text        NOT NULL,
    key              text        NOT NULL,
    -- 0 = in flight, 1 = completed
    state            smallint    NOT NULL CHECK (state IN (0, 1)),
    fingerprint      text        NOT NULL,
    token            bigint      NOT NULL,
    status           integer     NULL,
    -- Header pairs as two parallel arrays: values are raw bytes, not text.
    header_names     text[]      NULL,
    header_values    bytea[]     NULL,
    body             bytea       NULL,
    body_omitted     boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    completed_at     timestamptz NULL,
    expires_at       timestamptz NULL,
    lease_expires_at timestamptz NULL,
    -- Unique per (route, scope, key); key before scope so that `keys show` and
    -- `keys purge` (route + key, every scope) use this index too.
    PRIMARY KEY (route, key, scope)
);

-- The sweeper's scan: only completed rows ever expire.
CREATE INDEX idemgate_records_expires_at ON idemgate_records (expires_at) WHERE state = 1;

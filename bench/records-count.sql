-- A throwaway schema of `rows` records shaped like a busy deployment's, for
-- timing `idemgate_records` (the count) and the listing on Postgres
-- (docs/tuning-retention.md, "How listing and counting stay cheap"):
--
--   psql -v rows=10000000 -v schema=idemgate_count_bench -f bench/records-count.sql
--   ... measure ...
--   psql -c 'DROP SCHEMA idemgate_count_bench CASCADE'
--
-- 4 routes interleaved; 0.1% in flight, 0.01% outcome unknown, the rest
-- completed. Rows are written oldest first, as a gateway writes them: created
-- over the last 25.3 hours with a 24-hour retention, so the oldest 5% are
-- expired (awaiting the sweep) and lie together at the start of the heap.
-- The indexes are the migrations' (src/store/postgres/migrations), built
-- after the load.
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS :schema CASCADE;
CREATE SCHEMA :schema;
SET search_path = :schema;
SET maintenance_work_mem = '512MB';
SELECT setseed(0.42);

CREATE SEQUENCE idemgate_tokens AS bigint;
CREATE TABLE idemgate_records (
    route            text        NOT NULL,
    scope            text        NOT NULL,
    key              text        NOT NULL,
    state            smallint    NOT NULL CHECK (state IN (0, 1)),
    fingerprint      text        NOT NULL,
    token            bigint      NOT NULL,
    status           integer     NULL,
    header_names     text[]      NULL,
    header_values    bytea[]     NULL,
    body             bytea       NULL,
    body_omitted     boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    completed_at     timestamptz NULL,
    expires_at       timestamptz NULL,
    lease_expires_at timestamptz NULL,
    outcome_unknown  boolean     NOT NULL DEFAULT false
);

\timing on
INSERT INTO idemgate_records
SELECT 'route-' || (n % 4),
       repeat(md5('scope' || (n % 4)), 2),
       'key-' || n,
       s.state,
       repeat(md5(n::text), 2),
       n,
       CASE WHEN s.state = 1 THEN CASE WHEN s.unknown THEN 504 ELSE 201 END END,
       CASE WHEN s.state = 1 THEN '{content-type}'::text[] END,
       CASE WHEN s.state = 1 THEN ARRAY['application/json'::bytea] END,
       CASE WHEN s.state = 1
            THEN convert_to('{"id":"ch_' || n || '","amount":1000,"currency":"eur"}', 'UTF8') END,
       false,
       s.created,
       CASE WHEN s.state = 1 THEN s.created END,
       CASE WHEN s.state = 1 THEN s.created + interval '24 hours' END,
       CASE WHEN s.state = 0 THEN now() + interval '1 minute' END,
       s.unknown
FROM generate_series(1, :rows) AS n
CROSS JOIN LATERAL (
    SELECT CASE WHEN r < 0.001 THEN 0 ELSE 1 END::smallint AS state,
           r >= 0.001 AND r < 0.0011 AS unknown,
           now() - interval '25.263 hours' * (1 - n::float8 / :rows) AS created
    FROM (SELECT random() + 0 * n AS r) AS draw
) AS s;

ALTER TABLE idemgate_records ADD PRIMARY KEY (route, key, scope);
CREATE INDEX idemgate_records_expires_at ON idemgate_records (expires_at) WHERE state = 1;
CREATE INDEX idemgate_records_listing ON idemgate_records
    (route, state, outcome_unknown, created_at, key COLLATE "C", scope COLLATE "C")
    INCLUDE (expires_at);
SELECT setval('idemgate_tokens', :rows);
VACUUM ANALYZE idemgate_records;

SELECT pg_size_pretty(pg_relation_size('idemgate_records')) AS heap,
       pg_size_pretty(pg_relation_size('idemgate_records_listing')) AS listing_index,
       (SELECT count(*) FROM idemgate_records) AS records;

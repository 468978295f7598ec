-- An embedded store file of `rows` records shaped as bench/records-count.sql
-- shapes the Postgres table (4 routes; 0.1% in flight, 0.01% outcome unknown,
-- the rest completed; written oldest first over 25.3 hours with a 24-hour
-- retention, so the oldest 5% are expired), for timing the count
-- (docs/tuning-retention.md). The schema is the store's version 3
-- (src/store/embedded/schema.rs); "now" is 1800000000000 ms:
--
--   sqlite3 /tmp/count.db -cmd '.parameter set :rows 1000000' < bench/records-count-embedded.sql
--   sqlite3 /tmp/count.db '.timer on' "SELECT route, state, outcome_unknown, count(*)
--       FROM records INDEXED BY records_listing WHERE state = 0 OR expires_at > 1800000000000
--       GROUP BY route, state, outcome_unknown"
--   rm /tmp/count.db*
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
CREATE TABLE records (
    route TEXT NOT NULL, scope TEXT NOT NULL, key TEXT NOT NULL,
    state INTEGER NOT NULL CHECK (state IN (0, 1)), fingerprint TEXT NOT NULL, token INTEGER NOT NULL,
    status INTEGER NULL, headers BLOB NULL, body BLOB NULL, body_omitted INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL, completed_at INTEGER NULL, expires_at INTEGER NULL,
    lease_expires_at INTEGER NULL, outcome_unknown INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (route, key, scope));
CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX records_listing ON records (route, state, outcome_unknown, created_at, key, scope, expires_at);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :rows),
d AS (SELECT i, abs(random()) % 100000 AS r,
             1800000000000 - CAST(90947000 * (1.0 - CAST(i AS REAL) / :rows) AS INTEGER) AS created FROM n)
INSERT INTO records (route, scope, key, state, fingerprint, token, status, headers, body,
                     created_at, completed_at, expires_at, lease_expires_at, outcome_unknown)
SELECT 'route-' || (i % 4), 'a3f1c2d4e5b6a7980f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978', 'key-' || i,
       CASE WHEN r < 100 THEN 0 ELSE 1 END, hex(randomblob(32)), i,
       CASE WHEN r < 100 THEN NULL WHEN r < 110 THEN 504 ELSE 201 END,
       CASE WHEN r < 100 THEN NULL ELSE x'000c636f6e74656e742d74797065001061706c69636174696f6e2f6a736f6e' END,
       CASE WHEN r < 100 THEN NULL ELSE CAST('{"id":"ch_' || i || '","amount":1000,"currency":"eur"}' AS BLOB) END,
       created, CASE WHEN r < 100 THEN NULL ELSE created END,
       CASE WHEN r < 100 THEN NULL ELSE created + 86400000 END,
       CASE WHEN r < 100 THEN 1800000060000 END,
       r >= 100 AND r < 110
FROM d;
PRAGMA user_version = 3;

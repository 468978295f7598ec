-- idemgate schema version 2: outcome-unknown records marked, and an index for
-- operators' listing and counting by route and state.

-- Set at completion when the stored answer is the gateway's own
-- outcome-unknown problem (the request was sent, no answer came back).
-- Records completed before this version keep false: they replay as before
-- and age out within their retention.
-- IF NOT EXISTS: an operator may add it by hand first, to build the index
-- below concurrently before upgrading (docs/tuning-retention.md).
ALTER TABLE idemgate_records ADD COLUMN IF NOT EXISTS outcome_unknown boolean NOT NULL DEFAULT false;

-- `GET /admin/keys/{route}?state=`: one range per route and state, oldest
-- first; key and scope in byte order ("C"), the order every backend pages in.
-- `expires_at` rides along so `idemgate_records` counts from the index alone.
-- IF NOT EXISTS: on a large table, add the column and then build this index
-- with CREATE INDEX CONCURRENTLY under this name first
-- (docs/tuning-retention.md); this migration then finds both and adds nothing.
CREATE INDEX IF NOT EXISTS idemgate_records_listing ON idemgate_records
    (route, state, outcome_unknown, created_at, key COLLATE "C", scope COLLATE "C")
    INCLUDE (expires_at);

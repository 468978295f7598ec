-- What one new-key request costs the database, without the gateway: the
-- gateway's own RESERVE then COMPLETE (src/store/postgres/sql.rs), each its
-- own autocommit statement, as the store runs them on a pooled connection
-- (two round trips, no transaction around them). bench/run runs it with
--   pgbench -n -M prepared -c <pool_size> -j 2 -T <secs> -f bench/pgbench/new_key.sql
-- against the bench's schema (PGOPTIONS="-c search_path=bench_<pid>"), after
-- the gateway's migration created the tables.
--
-- Parameters are what the bench's gateway sends for a new key (read off a
-- row it wrote): route "charges", the hash of an empty scope, the request's
-- fingerprint, a 30 s lease (lock_timeout), the upstream's 201 with its four
-- headers and 193-byte body, one day of retention. The key is fresh on every
-- transaction: a per-client range plus a random offset (a repeat, about one
-- in 10^6 over a run, would be a replay, which is still one RESERVE). The
-- body and header values are hex bytea literals: pgbench would read ":1000"
-- inside the JSON as a variable.
\set key (:client_id + 1) * 1000000000000000 + random(0, 999999999999999)

WITH taken AS (
    INSERT INTO idemgate_records AS r
        (route, scope, key, state, fingerprint, token, body_omitted, created_at, lease_expires_at)
    VALUES ('charges', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', :key, 0,
            '0ad340721ab3e66f5233d37c641b0c7c0ce5110e053b985ca46f7cfa69b00f70',
            nextval('idemgate_tokens'), false, now(),
            now() + 30000::bigint * interval '1 millisecond')
    ON CONFLICT (route, key, scope) DO UPDATE SET
        state = 0, fingerprint = excluded.fingerprint, token = excluded.token,
        status = NULL, header_names = NULL, header_values = NULL, body = NULL,
        body_omitted = false, created_at = excluded.created_at, completed_at = NULL,
        expires_at = NULL, lease_expires_at = excluded.lease_expires_at
    WHERE (r.state = 1 AND coalesce(r.expires_at <= now(), true))
       OR (r.state = 0 AND coalesce(r.lease_expires_at <= now(), true))
    RETURNING r.token, r.lease_expires_at
)
SELECT true AS reserved, token, NULL::smallint AS state, NULL::boolean AS same,
       NULL::boolean AS live, lease_expires_at, NULL::bigint AS remaining_ms,
       NULL::integer AS status, NULL::text[] AS header_names,
       NULL::bytea[] AS header_values, NULL::bytea AS body, NULL::boolean AS body_omitted
FROM taken
UNION ALL
SELECT false, r.token, r.state, r.fingerprint = '0ad340721ab3e66f5233d37c641b0c7c0ce5110e053b985ca46f7cfa69b00f70',
       coalesce(CASE WHEN r.state = 1 THEN r.expires_at > now()
                     ELSE r.lease_expires_at > now() END, false),
       r.lease_expires_at,
       greatest(0, (extract(epoch FROM r.expires_at - now()) * 1000)::bigint),
       r.status,
       CASE WHEN r.fingerprint = '0ad340721ab3e66f5233d37c641b0c7c0ce5110e053b985ca46f7cfa69b00f70' THEN r.header_names END,
       CASE WHEN r.fingerprint = '0ad340721ab3e66f5233d37c641b0c7c0ce5110e053b985ca46f7cfa69b00f70' THEN r.header_values END,
       CASE WHEN r.fingerprint = '0ad340721ab3e66f5233d37c641b0c7c0ce5110e053b985ca46f7cfa69b00f70' THEN r.body END,
       r.body_omitted
FROM idemgate_records r
WHERE r.route = 'charges' AND r.scope = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
  AND r.key = :key AND NOT EXISTS (SELECT 1 FROM taken) \gset r_

UPDATE idemgate_records SET
    state = 1, status = 201,
    header_names = '{server,content-type,content-length,location}'::text[],
    header_values = '{"\\x6e67696e782f312e32322e31","\\x6170706c69636174696f6e2f6a736f6e","\\x313933","\\x2f76312f636861726765732f63685f334e513978324c6b6449774875376978305a7131"}'::bytea[],
    body = '\x7b226964223a2263685f334e513978324c6b6449774875376978305a7131222c226f626a656374223a22636861726765222c22616d6f756e74223a313030302c2263757272656e6379223a22657572222c22637573746f6d6572223a226375735f3432222c22737461747573223a22737563636565646564222c2263726561746564223a313730303030303030302c226c6976656d6f6465223a66616c73652c226465736372697074696f6e223a2262656e63686d61726b20636861726765227d'::bytea,
    body_omitted = false, completed_at = now(),
    expires_at = now() + 86400000::bigint * interval '1 millisecond',
    lease_expires_at = NULL
WHERE route = 'charges' AND scope = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
  AND key = :key AND token = :r_token AND state = 0
RETURNING fingerprint;

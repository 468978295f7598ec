//! The plans of statements whose speed depends on the planner's choice,
//! checked against a real PostgreSQL (`IDEMGATE_TEST_PG_URL`, default the
//! local `test` database): the sweep's on a table the planner knows nothing
//! about (`sql::SWEEP_PLAN` says why), a lease's lookups on one it has
//! analyzed (`sql::COMPLETE`).

use std::sync::atomic::{AtomicU32, Ordering};

use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

use super::{listing, migrations, sql};

fn base_url() -> String {
    std::env::var("IDEMGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The table as a test sees it: 20,000 completed records, half expired,
/// away from autovacuum so the plan is the same on every run; analyzed or
/// not.
struct Table {
    analyzed: bool,
}

impl Table {
    /// The plan of `statement` with `params`, after `setup`, in one
    /// transaction on a throwaway schema holding the table.
    async fn plan(&self, setup: &str, statement: &str, params: &[&(dyn ToSql + Sync)]) -> String {
        let (mut client, connection) = tokio_postgres::connect(&base_url(), NoTls)
            .await
            .expect("PostgreSQL at IDEMGATE_TEST_PG_URL");
        tokio::spawn(connection);
        static N: AtomicU32 = AtomicU32::new(0);
        let schema = format!(
            "idemgate_plans_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
                 SET search_path = {schema}"
            ))
            .await
            .unwrap();
        for (_, migration) in migrations::MIGRATIONS {
            client.batch_execute(migration).await.unwrap();
        }
        client
            .batch_execute(
                "ALTER TABLE idemgate_records SET (autovacuum_enabled = false);
                 INSERT INTO idemgate_records (route, scope, key, state, fingerprint, token,
                     status, created_at, completed_at, expires_at)
                 SELECT 'orders', 's', gen_random_uuid()::text, 1, 'f', g, 200, now(), now(),
                     now() + CASE WHEN g <= 10000 THEN interval '-1 hour' ELSE interval '1 day' END
                 FROM generate_series(1, 20000) AS g",
            )
            .await
            .unwrap();
        if self.analyzed {
            client
                .batch_execute("ANALYZE idemgate_records")
                .await
                .unwrap();
        }
        let tx = client.transaction().await.unwrap();
        tx.batch_execute(setup).await.unwrap();
        let rows = tx
            .query(&format!("EXPLAIN {statement}"), params)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
        rows.iter()
            .map(|row| row.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Before autovacuum first reaches the table: no statistics.
const NEW_TABLE: Table = Table { analyzed: false };
/// Any table autovacuum has reached: statistics say no record is in flight.
const ANALYZED: Table = Table { analyzed: true };

#[tokio::test]
async fn a_sweep_batch_scans_the_expiry_index_in_order_never_by_bitmap() {
    let plan = NEW_TABLE
        .plan(sql::SWEEP_PLAN, sql::SWEEP, &[&1000_i64])
        .await;
    assert!(!plan.contains("Bitmap"), "{plan}");
    // And the setting is what makes it so: without it, this table's plan is
    // the bitmap scan that reads every expired entry per batch.
    let plain = NEW_TABLE.plan("SELECT 1", sql::SWEEP, &[&1000_i64]).await;
    assert!(plain.contains("Bitmap"), "{plain}");
}

/// A completion and a release find their lease's row through the primary
/// key, not through the listing index's range of the route's in-flight
/// records (and, until a vacuum, of every record completed since).
#[tokio::test]
async fn a_lease_is_found_by_its_primary_key_on_an_analyzed_table() {
    let generic = "SET LOCAL plan_cache_mode = force_generic_plan";
    let (route, scope, key, token) = ("orders", "s", "k", 7_i64);
    let texts = |v: &str| vec![v.to_string(); 3];
    let complete_many: [&(dyn ToSql + Sync); 13] = [
        &texts(route),
        &texts(scope),
        &vec!["a".to_string(), "b".into(), "c".into()],
        &vec![token; 3],
        &vec![201_i32; 3],
        &vec!["content-type".to_string()],
        &vec![b"a".to_vec()],
        &vec![1_i32; 3],
        &vec![0_i32; 3],
        &vec![b"{}".to_vec(); 3],
        &vec![false; 3],
        &vec![1000_i64; 3],
        &vec![false; 3],
    ];
    let release: [&(dyn ToSql + Sync); 4] = [&route, &scope, &key, &token];
    let claim: &[u8] = &[7; 16];
    let release_claimed: [&(dyn ToSql + Sync); 4] = [&route, &scope, &key, &claim];
    let (names, values, body) = (
        vec!["content-type".to_string()],
        vec![b"a".to_vec()],
        b"{}".to_vec(),
    );
    let complete: [&(dyn ToSql + Sync); 11] = [
        &route, &scope, &key, &token, &201_i32, &names, &values, &body, &false, &1000_i64, &false,
    ];
    for (name, plan) in [
        (
            "COMPLETE",
            ANALYZED.plan(generic, sql::COMPLETE, &complete).await,
        ),
        (
            "COMPLETE_MANY",
            ANALYZED
                .plan(generic, sql::COMPLETE_MANY, &complete_many)
                .await,
        ),
        (
            "RELEASE",
            ANALYZED.plan(generic, sql::RELEASE, &release).await,
        ),
        (
            "RELEASE_CLAIMED",
            ANALYZED
                .plan(generic, sql::RELEASE_CLAIMED, &release_claimed)
                .await,
        ),
    ] {
        assert!(plan.contains("idemgate_records_pkey"), "{name}: {plan}");
        assert!(!plan.contains("idemgate_records_listing"), "{name}: {plan}");
    }
    // And `state + 0` is what makes it so: with `state = 0` the planner
    // takes the listing index on this table.
    let plain = ANALYZED
        .plan(
            generic,
            &sql::RELEASE.replace("state + 0 = 0", "state = 0"),
            &release,
        )
        .await;
    assert!(plain.contains("idemgate_records_listing"), "{plain}");
}

/// A page of every state reads each state's range of the listing index,
/// in order, never the table: one statement for the three states (one
/// snapshot) costs no scan.
#[tokio::test]
async fn a_page_of_every_state_reads_the_listing_index() {
    let generic = "SET LOCAL plan_cache_mode = force_generic_plan";
    let states: Vec<i16> = vec![0, 1, 1];
    let unknown = vec![false, false, true];
    let after = std::time::UNIX_EPOCH;
    let params: [&(dyn ToSql + Sync); 7] =
        [&"orders", &states, &unknown, &after, &"", &"", &101_i64];
    for setup in ["SELECT 1", generic] {
        for table in [&NEW_TABLE, &ANALYZED] {
            let plan = table.plan(setup, listing::PAGE, &params).await;
            assert!(plan.contains("idemgate_records_listing"), "{plan}");
            assert!(!plan.contains("Seq Scan on idemgate_records"), "{plan}");
            assert!(!plan.contains("Sort"), "{plan}");
        }
    }
}

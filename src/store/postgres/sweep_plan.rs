//! The sweep's plan on a table the planner knows nothing about (checked
//! against a real PostgreSQL: `IDEMGATE_TEST_PG_URL`, default the local
//! `test` database). Why it matters: `sql::SWEEP_PLAN`.

use tokio_postgres::NoTls;

use super::{migrations, sql};

fn base_url() -> String {
    std::env::var("IDEMGATE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The plan of one sweep batch, after `setup` in the same transaction.
async fn sweep_plan(setup: &str) -> String {
    let (mut client, connection) = tokio_postgres::connect(&base_url(), NoTls)
        .await
        .expect("PostgreSQL at IDEMGATE_TEST_PG_URL");
    tokio::spawn(connection);
    let schema = format!("idemgate_sweep_plan_{}", std::process::id());
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
    // Half of 20,000 completed records expired, and no ANALYZE: what a
    // table looks like before autovacuum first reaches it (kept away from it
    // here, so the plan is the same on every run).
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
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(setup).await.unwrap();
    let rows = tx
        .query(&format!("EXPLAIN {}", sql::SWEEP), &[&1000_i64])
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

#[tokio::test]
async fn a_sweep_batch_scans_the_expiry_index_in_order_never_by_bitmap() {
    let plan = sweep_plan(sql::SWEEP_PLAN).await;
    assert!(!plan.contains("Bitmap"), "{plan}");
    // And the setting is what makes it so: without it, this table's plan is
    // the bitmap scan that reads every expired entry per batch.
    let plain = sweep_plan("SELECT 1").await;
    assert!(plain.contains("Bitmap"), "{plain}");
}

//! The store model (see `store_model/mod.rs`) against `PostgresStore`, on a
//! fresh schema per case. Postgres keeps its own clock (`now()`), so the model
//! runs on the wall clock: `Advance` sleeps, and an expiry that falls inside
//! an operation's time window may be observed either way.
//!
//! Needs PostgreSQL as for `store_postgres.rs` (`scripts/test` starts one for its run).

mod pg_support;
mod store_model;

use std::sync::Arc;

use idemgate::store::PostgresStore;
use pg_support::TestSchema;
use store_model::{Backend, RealClock};

#[test]
fn postgres_store_follows_the_model_on_the_wall_clock() {
    store_model::check(16, || async {
        let schema = TestSchema::create().await;
        let store = PostgresStore::connect(&schema.config())
            .await
            .expect("connect to the test schema");
        Backend {
            store: Arc::new(store),
            clock: Arc::new(RealClock),
            // Dropped after the store: the schema goes with its tables.
            guard: Box::new(schema),
        }
    });
}

//! The store as `serve` runs it: the configured backend opened with its
//! cache metrics and timed and counted as a whole (`InstrumentedStore`),
//! and the work beside it: the sweeper and the per-state record counter.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::config::StoreConfig;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::store::{self, InstrumentedStore, MigrationReport, Store, StoreConfigExt, StoreError};

/// The store, and what opening it found of its schema and applied
/// (`log_schema`).
pub async fn open(
    config: &StoreConfig,
    metrics: &Metrics,
) -> Result<(Arc<dyn Store>, MigrationReport), StoreError> {
    let (backend, report) = store::open_with_metrics(config, metrics).await?;
    let store: Arc<dyn Store> = Arc::new(InstrumentedStore::new(backend, metrics.clone()));
    Ok((store, report))
}

/// One line per start on the store's schema, so an operator upgrading sees
/// whether a migration ran: the version found (0: none yet), the version
/// now and the migrations applied.
pub fn log_schema(config: &StoreConfig, report: &MigrationReport) {
    let message = if report.up_to_date() {
        "store schema up to date"
    } else {
        "store schema migrated"
    };
    tracing::info!(
        store = config.backend_name(),
        schema_found = report.found,
        schema_version = report.now,
        migrations_applied = ?report.applied,
        "{message}"
    );
}

/// The background tasks beside the store, until serving ends.
pub struct Upkeep {
    sweeper: JoinHandle<()>,
    record_counter: JoinHandle<()>,
}

impl Upkeep {
    /// Starts the sweeper, then the record counter, at the backend's
    /// interval. The counter reads the idempotent routes of the running
    /// config at each pass, so a reload's routes are counted.
    pub fn start(
        store: &Arc<dyn Store>,
        config: &StoreConfig,
        metrics: &Metrics,
        gateway: &Arc<Gateway>,
    ) -> Self {
        let (interval, batch) = store::sweep_settings(config);
        let sweeper = {
            let metrics = metrics.clone();
            store::spawn_sweeper(
                store.clone(),
                interval,
                batch,
                Arc::new(move |swept| metrics.records_swept.inc_by(swept)),
            )
        };
        let record_counter = {
            let gateway = gateway.clone();
            crate::retention::spawn_record_counter(
                store.clone(),
                interval,
                metrics.records.clone(),
                Arc::new(move || {
                    let config = gateway.runtime().config.clone();
                    (config.routes.iter())
                        .filter(|route| route.idempotency)
                        .map(|route| route.name.clone())
                        .collect()
                }),
            )
        };
        Self {
            sweeper,
            record_counter,
        }
    }

    pub fn stop(self) {
        self.sweeper.abort();
        self.record_counter.abort();
    }
}

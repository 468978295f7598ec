use std::sync::Arc;
use std::time::Duration;

use super::{EmbeddedStore, Store, StoreError};
use crate::config::StoreConfig;

/// Opens the configured backend.
pub async fn open(config: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    match config {
        StoreConfig::Embedded(embedded) => {
            let path = embedded.path.clone();
            // Opening creates the file and runs the schema: blocking work.
            let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(&path))
                .await
                .map_err(|err| StoreError::Unavailable(format!("opening the store: {err}")))??;
            Ok(Arc::new(store))
        }
        StoreConfig::Postgres(_) => Err(StoreError::Unavailable(
            "the postgres backend is not available in this build yet; use backend = \"embedded\""
                .into(),
        )),
    }
}

/// (interval, batch) of the background sweeper for the configured backend.
pub fn sweep_settings(config: &StoreConfig) -> (Duration, u32) {
    match config {
        StoreConfig::Embedded(c) => (c.sweep_interval, c.sweep_batch),
        StoreConfig::Postgres(c) => (c.sweep_interval, c.sweep_batch),
    }
}

pub trait StoreConfigExt {
    /// `embedded` or `postgres`, for messages.
    fn backend_name(&self) -> &'static str;
}

impl StoreConfigExt for StoreConfig {
    fn backend_name(&self) -> &'static str {
        match self {
            StoreConfig::Embedded(_) => "embedded",
            StoreConfig::Postgres(_) => "postgres",
        }
    }
}

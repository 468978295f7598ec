//! A [`Store`] wrapper that times every operation and counts failures
//! (`idemgate_store_duration_seconds`, `idemgate_store_errors_total`), so each
//! backend stays free of metrics code.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;

use super::{Lease, RecordId, RecordInfo, Reservation, Store, StoreError, StoredResponse};
use crate::metrics::Metrics;

pub struct InstrumentedStore {
    inner: Arc<dyn Store>,
    metrics: Metrics,
}

impl InstrumentedStore {
    pub fn new(inner: Arc<dyn Store>, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }

    fn observe<T>(&self, op: &str, started: Instant, result: &Result<T, StoreError>) {
        let backend = self.inner.backend();
        self.metrics
            .store_duration
            .with_label_values(&[backend, op])
            .observe(started.elapsed().as_secs_f64());
        // A fenced completion is the store doing its job, not failing.
        if let Err(StoreError::Unavailable(_)) = result {
            self.metrics
                .store_errors
                .with_label_values(&[backend, op])
                .inc();
        }
    }
}

macro_rules! timed {
    ($self:ident, $op:literal, $call:expr) => {{
        let started = Instant::now();
        let result = $call.await;
        $self.observe($op, started, &result);
        result
    }};
}

#[async_trait]
impl Store for InstrumentedStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn reserve_with_expiry(
        &self,
        id: &RecordId,
        fingerprint: &str,
        lease_for: Duration,
    ) -> Result<(Reservation, Option<SystemTime>), StoreError> {
        timed!(
            self,
            "reserve",
            self.inner.reserve_with_expiry(id, fingerprint, lease_for)
        )
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<(), StoreError> {
        timed!(
            self,
            "complete",
            self.inner.complete(lease, response, retain_for)
        )
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        timed!(self, "release", self.inner.release(lease))
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        timed!(self, "records", self.inner.records(route, key))
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        timed!(self, "purge", self.inner.purge(route, key))
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        timed!(self, "sweep", self.inner.sweep(batch))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        timed!(self, "ping", self.inner.ping())
    }
}

//! A [`Store`] wrapper that times every operation and counts failures
//! (`idemgate_store_duration_seconds`, `idemgate_store_errors_total`), so each
//! backend stays free of metrics code.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use prometheus::{Histogram, IntCounter};

use super::{
    Count, Kept, Lease, ListQuery, Page, RecordId, RecordInfo, Reservation, Store, StoreError,
    StoredResponse,
};
use crate::metrics::Metrics;

pub struct InstrumentedStore {
    inner: Arc<dyn Store>,
    metrics: Metrics,
    /// The `backend` label: the configured `store.backend` ("embedded" or
    /// "postgres"), also with `[store.redis]` in front of Postgres (Redis
    /// has its own series, `idemgate_cache_lookups_total`).
    label: &'static str,
    /// Each operation's series, looked up once (`with_label_values` hashes
    /// and locks on every call; `reserve` runs on every keyed request).
    series: [OpSeries; Op::COUNT],
}

/// Every operation's error series exists from the start at 0 (Prometheus'
/// advice for known label values: a counter that appears only at its first
/// failure has no `rate()` before it, and `/metrics` would not show the
/// family at all); a duration series appears with the operation's first run.
#[derive(Default)]
struct OpSeries {
    duration: OnceLock<Histogram>,
    errors: OnceLock<IntCounter>,
}

#[derive(Clone, Copy)]
enum Op {
    Reserve,
    Complete,
    Release,
    Records,
    Purge,
    Sweep,
    Ping,
    List,
    Count,
    /// Not an operation of its own: opening a sealed answer that an
    /// operation read (docs/data-protection.md). Counted apart from a store
    /// that is down, which it is not: no duration, errors only.
    Open,
}

impl Op {
    const COUNT: usize = Op::Open as usize + 1;
    const ALL: [Op; Op::COUNT] = [
        Op::Reserve,
        Op::Complete,
        Op::Release,
        Op::Records,
        Op::Purge,
        Op::Sweep,
        Op::Ping,
        Op::List,
        Op::Count,
        Op::Open,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Op::Reserve => "reserve",
            Op::Complete => "complete",
            Op::Release => "release",
            Op::Records => "records",
            Op::Purge => "purge",
            Op::Sweep => "sweep",
            Op::Ping => "ping",
            Op::List => "list",
            Op::Count => "count",
            Op::Open => "open",
        }
    }
}

impl InstrumentedStore {
    pub fn new(inner: Arc<dyn Store>, metrics: Metrics) -> Self {
        let label = match inner.backend() {
            "redis+postgres" => "postgres",
            other => other,
        };
        let series: [OpSeries; Op::COUNT] = std::array::from_fn(|_| OpSeries::default());
        for op in Op::ALL {
            series[op as usize].errors.get_or_init(|| {
                metrics
                    .store_errors
                    .with_label_values(&[label, op.as_str()])
            });
        }
        Self {
            inner,
            metrics,
            label,
            series,
        }
    }

    fn observe<T>(&self, op: Op, started: Instant, result: &Result<T, StoreError>) {
        let series = &self.series[op as usize];
        let labels = || [self.label, op.as_str()];
        series
            .duration
            .get_or_init(|| self.metrics.store_duration.with_label_values(&labels()))
            .observe(started.elapsed().as_secs_f64());
        // A fenced completion is the store doing its job, not failing.
        let failed = match result {
            Err(StoreError::Unavailable(_)) => op,
            Err(StoreError::Sealed(_) | StoreError::Damaged(_)) => Op::Open,
            _ => return,
        };
        let labels = [self.label, failed.as_str()];
        self.series[failed as usize]
            .errors
            .get_or_init(|| self.metrics.store_errors.with_label_values(&labels))
            .inc();
    }
}

macro_rules! timed {
    ($self:ident, $op:expr, $call:expr) => {{
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
    ) -> Result<(Reservation, Option<Kept>), StoreError> {
        timed!(
            self,
            Op::Reserve,
            self.inner.reserve_with_expiry(id, fingerprint, lease_for)
        )
    }

    async fn complete(
        &self,
        lease: &Lease,
        response: &StoredResponse,
        retain_for: Duration,
    ) -> Result<SystemTime, StoreError> {
        timed!(
            self,
            Op::Complete,
            self.inner.complete(lease, response, retain_for)
        )
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        timed!(self, Op::Release, self.inner.release(lease))
    }

    async fn records(&self, route: &str, key: &str) -> Result<Vec<RecordInfo>, StoreError> {
        timed!(self, Op::Records, self.inner.records(route, key))
    }

    async fn purge(&self, route: &str, key: &str) -> Result<u64, StoreError> {
        timed!(self, Op::Purge, self.inner.purge(route, key))
    }

    async fn sweep(&self, batch: u32) -> Result<u64, StoreError> {
        timed!(self, Op::Sweep, self.inner.sweep(batch))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        timed!(self, Op::Ping, self.inner.ping())
    }

    fn stopped_for_good(&self) -> Option<StoreError> {
        self.inner.stopped_for_good()
    }

    async fn list(&self, query: &ListQuery) -> Result<Page, StoreError> {
        timed!(self, Op::List, self.inner.list(query))
    }

    async fn count(&self) -> Result<Vec<Count>, StoreError> {
        timed!(self, Op::Count, self.inner.count())
    }
}

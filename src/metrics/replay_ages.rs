//! Replay ages: the Prometheus histogram, and a finer summary per route
//! kept since the process started, whose quantiles `GET /admin/routes`
//! shows. The summary outlives config reloads (a route keeps its history
//! while its name stays).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus::{Histogram, HistogramVec};

/// `idemgate_replay_age_seconds` buckets, in seconds: 1 s to 30 days, dense
/// where retentions are usually set (minutes to a few days).
pub const BUCKETS_SECONDS: [f64; 21] = [
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    21600.0,
    43200.0,
    86400.0,
    172_800.0,
    259_200.0,
    604_800.0,
    1_209_600.0,
    2_592_000.0,
];

/// Log-scale buckets of the summary: each is `STEP` times the one below,
/// from 1 ms, so a quantile read from them is within 5% of the truth.
const STEP: f64 = 1.05;
const FIRST_MS: f64 = 1.0;
/// Enough buckets to pass 30 days (1.05^470 ms ≈ 105 days): older ages
/// land in the last.
const BUCKETS: usize = 470;

/// One route's summary. Lock-free: every replay adds to it.
pub struct AgeSummary {
    counts: Box<[AtomicU64]>,
    count: AtomicU64,
    max_ms: AtomicU64,
}

impl Default for AgeSummary {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max_ms: AtomicU64::new(0),
        }
    }
}

/// What `GET /admin/routes` shows, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgeQuantiles {
    pub count: u64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
}

fn bucket_of(ms: u64) -> usize {
    if ms as f64 <= FIRST_MS {
        return 0;
    }
    let at = ((ms as f64 / FIRST_MS).ln() / STEP.ln()).ceil();
    (at as usize).min(BUCKETS - 1)
}

/// A bucket's upper bound, in milliseconds.
fn upper_ms(bucket: usize) -> f64 {
    FIRST_MS * STEP.powi(bucket as i32)
}

impl AgeSummary {
    pub fn observe(&self, age: Duration) {
        let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ms)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Each quantile is the upper bound of the bucket it falls in, never
    /// above the largest age seen.
    pub fn quantiles(&self) -> AgeQuantiles {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let max_ms = self.max_ms.load(Ordering::Relaxed) as f64;
        let quantile = |q: f64| -> Option<f64> {
            if total == 0 {
                return None;
            }
            // The rank of the q-quantile, 1-based (nearest rank).
            let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
            let mut seen = 0;
            for (bucket, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return Some(upper_ms(bucket).min(max_ms) / 1000.0);
                }
            }
            Some(max_ms / 1000.0)
        };
        AgeQuantiles {
            count: total,
            p50: quantile(0.5),
            p99: quantile(0.99),
            p999: quantile(0.999),
            max: (total > 0).then_some(max_ms / 1000.0),
        }
    }
}

/// Every route's replay ages; shared by the gateway (observing) and the
/// admin plane (reading). A replay finds its route's series under a read
/// lock, without `with_label_values`' hashing and locking.
#[derive(Clone)]
pub struct ReplayAges {
    histogram: HistogramVec,
    /// foldhash: looked up on every replay (as the replay copies are).
    routes: Arc<RwLock<foldhash::HashMap<String, Arc<RouteAges>>>>,
}

struct RouteAges {
    series: Histogram,
    summary: Arc<AgeSummary>,
}

impl ReplayAges {
    pub fn new(histogram: HistogramVec) -> Self {
        Self {
            histogram,
            routes: Arc::default(),
        }
    }

    pub fn histogram(&self) -> &HistogramVec {
        &self.histogram
    }

    fn route(&self, route: &str) -> Arc<RouteAges> {
        if let Some(known) = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(route)
        {
            return known.clone();
        }
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        routes
            .entry(route.to_owned())
            .or_insert_with(|| {
                Arc::new(RouteAges {
                    series: self.histogram.with_label_values(&[route]),
                    summary: Arc::default(),
                })
            })
            .clone()
    }

    /// The route's replay ages since the process started; a route never
    /// replayed gets no series made for it.
    pub fn quantiles(&self, route: &str) -> AgeQuantiles {
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        match routes.get(route) {
            Some(ages) => ages.summary.quantiles(),
            None => AgeSummary::default().quantiles(),
        }
    }

    /// One replay of a record completed `age` ago.
    pub fn observe(&self, route: &str, age: Duration) {
        let ages = self.route(route);
        ages.series.observe(age.as_secs_f64());
        ages.summary.observe(age);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_five_percent_and_never_above_the_max() {
        let summary = AgeSummary::default();
        assert_eq!(summary.quantiles().count, 0);
        assert_eq!(summary.quantiles().p50, None);
        // 1..=1000 seconds, once each.
        for s in 1..=1000 {
            summary.observe(Duration::from_secs(s));
        }
        let q = summary.quantiles();
        assert_eq!(q.count, 1000);
        let near = |got: Option<f64>, want: f64| {
            let got = got.unwrap();
            assert!(got >= want && got <= want * 1.05, "{got} vs {want}");
        };
        near(q.p50, 500.0);
        near(q.p99, 990.0);
        near(q.p999, 999.0);
        assert_eq!(q.max, Some(1000.0));
    }

    #[test]
    fn ages_past_the_last_bucket_are_kept_in_it() {
        let summary = AgeSummary::default();
        summary.observe(Duration::from_secs(10 * 365 * 86400));
        summary.observe(Duration::ZERO);
        let q = summary.quantiles();
        assert_eq!(q.count, 2);
        assert_eq!(q.p50, Some(0.001));
        assert_eq!(q.max, Some(10.0 * 365.0 * 86400.0));
    }
}

//! Every metric of the gateway, named in one place, registered on a registry
//! that `main` creates and passes down. Label values are bounded: route names
//! and upstream names come from the config, never from requests.

mod executing;
mod replay_ages;

pub use executing::Executing;
pub use replay_ages::ReplayAges;

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub const REQUESTS_TOTAL: &str = "idemgate_requests_total";
pub const REQUEST_DURATION: &str = "idemgate_request_duration_seconds";
pub const UPSTREAM_DURATION: &str = "idemgate_upstream_duration_seconds";
pub const STORE_DURATION: &str = "idemgate_store_duration_seconds";
pub const STORE_ERRORS: &str = "idemgate_store_errors_total";
pub const CACHE_LOOKUPS: &str = "idemgate_cache_lookups_total";
pub const CACHE_WRITES: &str = "idemgate_cache_writes_total";
pub const UNANSWERED_RESERVATIONS: &str = "idemgate_unanswered_reservations_total";
pub const INFLIGHT: &str = "idemgate_inflight";
pub const EXECUTIONS: &str = "idemgate_executions_total";
pub const RECORDS_SWEPT: &str = "idemgate_records_swept_total";
pub const CONFIG_RELOADS: &str = "idemgate_config_reloads_total";
pub const REGION_FORWARDS: &str = "idemgate_region_forwards_total";
pub const REPLAY_AGE: &str = "idemgate_replay_age_seconds";
pub const RECORDS: &str = "idemgate_records";
pub const ROUTE_RETENTION: &str = "idemgate_route_retention_seconds";
pub const BUFFERED_BODIES: &str = "idemgate_buffered_body_bytes";
pub const TLS_REFUSED: &str = "idemgate_tls_refused_total";
pub const CONNECTIONS_EVICTED: &str = "idemgate_connections_evicted_total";

/// From 100µs to 60s: a replay from memory and a slow upstream on one scale.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// How a request on a route ended (`idemgate_requests_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    New,
    Replayed,
    Conflict,
    Mismatch,
    MissingKey,
    InvalidKey,
    TooLarge,
    Passthrough,
    Released,
    StoreUnavailable,
    UpstreamError,
    OutcomeUnknown,
    Degraded,
    /// Listed apart: refused by the route's `max_in_flight`.
    Overloaded,
    /// A webhook route refused the request's signature.
    InvalidSignature,
    /// Sent to the key's home region, which answered (docs/multi-region.md).
    Forwarded,
    /// The key's home region could not be reached (503).
    RegionUnavailable,
}

impl Outcome {
    const COUNT: usize = Outcome::RegionUnavailable as usize + 1;

    /// The outcomes of docs/operating.md#metrics: every route can end a request in any of them.
    /// (`Overloaded` only a route with `max_in_flight`.)
    const ANNOUNCED: [Outcome; 13] = [
        Outcome::New,
        Outcome::Replayed,
        Outcome::Conflict,
        Outcome::Mismatch,
        Outcome::MissingKey,
        Outcome::InvalidKey,
        Outcome::TooLarge,
        Outcome::Passthrough,
        Outcome::Released,
        Outcome::StoreUnavailable,
        Outcome::UpstreamError,
        Outcome::OutcomeUnknown,
        Outcome::Degraded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::New => "new",
            Outcome::Replayed => "replayed",
            Outcome::Conflict => "conflict",
            Outcome::Mismatch => "mismatch",
            Outcome::MissingKey => "missing_key",
            Outcome::InvalidKey => "invalid_key",
            Outcome::TooLarge => "too_large",
            Outcome::Passthrough => "passthrough",
            Outcome::Released => "released",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::UpstreamError => "upstream_error",
            Outcome::OutcomeUnknown => "outcome_unknown",
            Outcome::Degraded => "degraded",
            Outcome::Overloaded => "overloaded",
            Outcome::InvalidSignature => "invalid_signature",
            Outcome::Forwarded => "forwarded",
            Outcome::RegionUnavailable => "region_unavailable",
        }
    }
}

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub upstream_duration: HistogramVec,
    pub store_duration: HistogramVec,
    pub store_errors: IntCounterVec,
    pub cache_lookups: IntCounterVec,
    /// Writes to Redis by result: `refused` is Redis up and saying no
    /// (`OOM`, `READONLY`), which no lookup shows.
    pub cache_writes: IntCounterVec,
    /// Postgres reservations given up while they may have committed, by
    /// what freeing them came to.
    pub unanswered_reservations: IntCounterVec,
    pub inflight: IntGaugeVec,
    /// Keyed executions ended, their clients gone or not: what
    /// `idemgate_requests_total` leaves out of a request whose client left.
    pub executions: IntCounterVec,
    pub records_swept: IntCounter,
    pub config_reloads: IntCounterVec,
    pub region_forwards: IntCounterVec,
    /// `idemgate_replay_age_seconds`, with its summary per route.
    pub replay_ages: ReplayAges,
    pub records: IntGaugeVec,
    /// Each idempotent route's `retention`, so replay ages can be charted
    /// against it (deploy/observability).
    pub route_retention: prometheus::GaugeVec,
    /// Bytes of request bodies and of keyed answers not yet taken held now
    /// (`server.max_buffered_bodies` bounds them), read off the budget when
    /// `/metrics` is scraped.
    pub buffered_bodies: IntGauge,
    /// Connections a TLS listener closed without serving a request, by
    /// listener and reason.
    pub tls_refused: IntCounterVec,
    /// Connections with no request in progress closed for a newcomer at
    /// `max_connections`, by listener.
    pub connections_evicted: IntCounterVec,
}

impl Metrics {
    pub fn new(registry: Registry) -> Result<Self, prometheus::Error> {
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
                labels,
            )
        };
        let metrics = Self {
            requests: IntCounterVec::new(
                Opts::new(REQUESTS_TOTAL, "Requests by route and outcome."),
                &["route", "outcome"],
            )?,
            request_duration: histogram(
                REQUEST_DURATION,
                "Time from request head to answer head, by route and outcome.",
                &["route", "outcome"],
            )?,
            upstream_duration: histogram(
                UPSTREAM_DURATION,
                "Time to the upstream's answer head, by route and upstream.",
                &["route", "upstream"],
            )?,
            store_duration: histogram(
                STORE_DURATION,
                "Store operation latency.",
                &["backend", "op"],
            )?,
            store_errors: IntCounterVec::new(
                Opts::new(STORE_ERRORS, "Store operations that failed."),
                &["backend", "op"],
            )?,
            cache_lookups: IntCounterVec::new(
                Opts::new(CACHE_LOOKUPS, "Fast-path cache lookups by result."),
                &["result"],
            )?,
            cache_writes: IntCounterVec::new(
                Opts::new(
                    CACHE_WRITES,
                    "Fast-path cache writes (answers, write-backs, purge marks) by result.",
                ),
                &["result"],
            )?,
            unanswered_reservations: IntCounterVec::new(
                Opts::new(
                    UNANSWERED_RESERVATIONS,
                    "Postgres reservations given up while they may have committed, by what freeing them came to.",
                ),
                &["result"],
            )?,
            inflight: IntGaugeVec::new(
                Opts::new(INFLIGHT, "Keyed requests currently executing, by route."),
                &["route"],
            )?,
            executions: IntCounterVec::new(
                Opts::new(
                    EXECUTIONS,
                    "Keyed executions ended (answer recorded, or key freed), by route, whether or not their client stayed.",
                ),
                &["route"],
            )?,
            records_swept: IntCounter::new(RECORDS_SWEPT, "Expired records deleted.")?,
            config_reloads: IntCounterVec::new(
                Opts::new(CONFIG_RELOADS, "Configuration reloads by result."),
                &["result"],
            )?,
            region_forwards: IntCounterVec::new(
                Opts::new(
                    REGION_FORWARDS,
                    "Keyed requests forwarded to their home region, by region and result.",
                ),
                &["region", "result"],
            )?,
            replay_ages: ReplayAges::new(HistogramVec::new(
                HistogramOpts::new(
                    REPLAY_AGE,
                    "Age of a record (now - completion) when it was replayed, by route.",
                )
                .buckets(replay_ages::BUCKETS_SECONDS.to_vec()),
                &["route"],
            )?),
            records: IntGaugeVec::new(
                Opts::new(
                    RECORDS,
                    "Unexpired records by route and state (in_flight, completed, outcome_unknown).",
                ),
                &["route", "state"],
            )?,
            route_retention: prometheus::GaugeVec::new(
                Opts::new(
                    ROUTE_RETENTION,
                    "The configured retention of each idempotent route.",
                ),
                &["route"],
            )?,
            buffered_bodies: IntGauge::new(
                BUFFERED_BODIES,
                "Bytes of request bodies read whole and of keyed answers not yet taken by their clients, held now (server.max_buffered_bodies bounds them).",
            )?,
            tls_refused: IntCounterVec::new(
                Opts::new(
                    TLS_REFUSED,
                    "Connections a TLS listener closed without serving a request, by listener and reason.",
                ),
                &["listener", "reason"],
            )?,
            connections_evicted: IntCounterVec::new(
                Opts::new(
                    CONNECTIONS_EVICTED,
                    "Connections with no request in progress closed for a newcomer at max_connections, by listener.",
                ),
                &["listener"],
            )?,
            registry,
        };
        let r = &metrics.registry;
        r.register(Box::new(metrics.requests.clone()))?;
        r.register(Box::new(metrics.request_duration.clone()))?;
        r.register(Box::new(metrics.upstream_duration.clone()))?;
        r.register(Box::new(metrics.store_duration.clone()))?;
        r.register(Box::new(metrics.store_errors.clone()))?;
        r.register(Box::new(metrics.cache_lookups.clone()))?;
        r.register(Box::new(metrics.cache_writes.clone()))?;
        r.register(Box::new(metrics.unanswered_reservations.clone()))?;
        r.register(Box::new(metrics.inflight.clone()))?;
        r.register(Box::new(metrics.executions.clone()))?;
        r.register(Box::new(metrics.records_swept.clone()))?;
        r.register(Box::new(metrics.config_reloads.clone()))?;
        r.register(Box::new(metrics.region_forwards.clone()))?;
        r.register(Box::new(metrics.replay_ages.histogram().clone()))?;
        r.register(Box::new(metrics.records.clone()))?;
        r.register(Box::new(metrics.route_retention.clone()))?;
        r.register(Box::new(metrics.buffered_bodies.clone()))?;
        r.register(Box::new(metrics.tls_refused.clone()))?;
        r.register(Box::new(metrics.connections_evicted.clone()))?;
        for listener in ["data", "admin"] {
            metrics.connections_evicted.with_label_values(&[listener]);
        }
        // Pre-create the label-less series so they read 0 rather than being absent.
        for result in ["ok", "rejected"] {
            metrics.config_reloads.with_label_values(&[result]);
        }
        for result in ["hit", "miss", "error"] {
            metrics.cache_lookups.with_label_values(&[result]);
        }
        Ok(metrics)
    }

    /// `idemgate_route_retention_seconds` for the idempotent routes of the
    /// config now in effect: each one's `retention`, and no series for a
    /// route that is gone.
    /// Set before the others are removed: a scrape in between sees every
    /// route that stays, with its old or its new value.
    pub fn set_route_retentions(&self, retentions: &[(&str, Duration)]) {
        for (route, retention) in retentions {
            self.route_retention
                .with_label_values(&[route])
                .set(retention.as_secs_f64());
        }
        // A set, not a scan of the list per series: thousands of routes.
        let kept: std::collections::HashSet<&str> =
            retentions.iter().map(|(route, _)| *route).collect();
        let present = prometheus::core::Collector::collect(&self.route_retention);
        let gone: Vec<String> = present
            .iter()
            .flat_map(|family| family.get_metric())
            .flat_map(|series| series.get_label())
            .map(|label| label.value())
            .filter(|route| !kept.contains(route))
            .map(str::to_owned)
            .collect();
        for route in gone {
            // Only this function changes the vector: each is still there.
            let _ = self.route_retention.remove_label_values(&[&route]);
        }
    }

    /// The Prometheus text exposition of everything registered.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let families = self.registry.gather();
        if let Err(err) = TextEncoder::new().encode(&families, &mut out) {
            tracing::warn!(error = %err, "encoding metrics failed");
        }
        out
    }
}

/// One route's series, each looked up once: `with_label_values` hashes its
/// labels and takes the vector's lock on every call, and the request path
/// would otherwise do that three to four times per request. A series is
/// made on first use, unless `announce` made it before; a config reload
/// builds new routes and with them new, empty caches of the same series.
#[derive(Debug)]
pub struct RouteMeters {
    route: String,
    upstream: String,
    counts: [OnceLock<IntCounter>; Outcome::COUNT],
    durations: [OnceLock<Histogram>; Outcome::COUNT],
    upstream_duration: OnceLock<Histogram>,
    inflight: OnceLock<IntGauge>,
    executions: OnceLock<IntCounter>,
}

impl RouteMeters {
    pub fn new(route: &str, upstream: &str) -> Self {
        Self {
            route: route.to_owned(),
            upstream: upstream.to_owned(),
            counts: std::array::from_fn(|_| OnceLock::new()),
            durations: std::array::from_fn(|_| OnceLock::new()),
            upstream_duration: OnceLock::new(),
            inflight: OnceLock::new(),
            executions: OnceLock::new(),
        }
    }

    /// Makes the route's `idemgate_requests_total` (one per listed outcome),
    /// `idemgate_inflight` and `idemgate_executions_total` read 0 before its
    /// first request. A counter
    /// that first appears at 1 hides that increment from `increase()` and
    /// `rate()`: an alert on the first mismatch of a route would never fire.
    /// Histograms are still made on first use (21 lines a series).
    pub fn announce(&self, metrics: &Metrics) {
        for outcome in Outcome::ANNOUNCED {
            self.count(metrics, outcome);
        }
        self.inflight(metrics);
        self.executions(metrics);
    }

    /// Makes one more outcome's series read 0 before its first request, for
    /// an outcome only some routes can end in (`invalid_signature`: webhook
    /// routes), so an alert on its first increase fires.
    pub fn announce_outcome(&self, metrics: &Metrics, outcome: Outcome) {
        self.count(metrics, outcome);
    }

    fn count(&self, metrics: &Metrics, outcome: Outcome) -> &IntCounter {
        self.counts[outcome as usize].get_or_init(|| {
            metrics
                .requests
                .with_label_values(&[self.route.as_str(), outcome.as_str()])
        })
    }

    /// `idemgate_requests_total` and `idemgate_request_duration_seconds`.
    pub fn finished(&self, metrics: &Metrics, outcome: Outcome, took: Duration) {
        self.count(metrics, outcome).inc();
        self.durations[outcome as usize]
            .get_or_init(|| {
                metrics
                    .request_duration
                    .with_label_values(&[self.route.as_str(), outcome.as_str()])
            })
            .observe(took.as_secs_f64());
    }

    /// `idemgate_upstream_duration_seconds`.
    pub fn upstream_answered(&self, metrics: &Metrics, took: Duration) {
        self.upstream_duration
            .get_or_init(|| {
                metrics
                    .upstream_duration
                    .with_label_values(&[self.route.as_str(), self.upstream.as_str()])
            })
            .observe(took.as_secs_f64());
    }

    /// `idemgate_inflight` of this route.
    fn inflight(&self, metrics: &Metrics) -> IntGauge {
        self.inflight
            .get_or_init(|| metrics.inflight.with_label_values(&[self.route.as_str()]))
            .clone()
    }

    /// `idemgate_executions_total` of this route.
    fn executions(&self, metrics: &Metrics) -> IntCounter {
        self.executions
            .get_or_init(|| metrics.executions.with_label_values(&[self.route.as_str()]))
            .clone()
    }

    /// One keyed execution of this route, counted for as long as it runs.
    pub fn executing(&self, metrics: &Metrics) -> Executing {
        Executing::new(self.inflight(metrics), self.executions(metrics))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_meters_count_into_the_labelled_series() {
        let metrics = Metrics::new(Registry::new()).expect("metrics register");
        let meters = RouteMeters::new("charges", "api");
        meters.finished(&metrics, Outcome::Replayed, Duration::from_millis(2));
        meters.finished(&metrics, Outcome::Replayed, Duration::from_millis(3));
        meters.finished(&metrics, Outcome::Conflict, Duration::from_millis(1));
        meters.upstream_answered(&metrics, Duration::from_millis(5));
        let gauge = meters.inflight(&metrics);
        gauge.inc();

        let requests = |outcome| {
            metrics
                .requests
                .with_label_values(&["charges", outcome])
                .get()
        };
        assert_eq!(requests("replayed"), 2);
        assert_eq!(requests("conflict"), 1);
        assert_eq!(requests("new"), 0);
        let replayed = metrics
            .request_duration
            .with_label_values(&["charges", "replayed"]);
        assert_eq!(replayed.get_sample_count(), 2);
        let upstream = metrics
            .upstream_duration
            .with_label_values(&["charges", "api"]);
        assert_eq!(upstream.get_sample_count(), 1);
        assert_eq!(metrics.inflight.with_label_values(&["charges"]).get(), 1);
        let text = String::from_utf8(metrics.render()).expect("utf-8 exposition");
        assert!(
            !text.contains("outcome=\"mismatch\""),
            "unused outcomes stay absent unless announced"
        );
    }

    #[test]
    fn an_announced_route_reads_zero_before_its_first_request() {
        let metrics = Metrics::new(Registry::new()).expect("metrics register");
        let meters = RouteMeters::new("charges", "api");
        meters.announce(&metrics);
        let text = String::from_utf8(metrics.render()).expect("utf-8 exposition");
        for outcome in Outcome::ANNOUNCED {
            let line = format!(
                "idemgate_requests_total{{outcome=\"{}\",route=\"charges\"}} 0",
                outcome.as_str()
            );
            assert!(text.contains(&line), "missing `{line}`:\n{text}");
        }
        assert!(
            text.contains("idemgate_inflight{route=\"charges\"} 0"),
            "{text}"
        );
        assert!(!text.contains("outcome=\"overloaded\""), "{text}");
        assert!(
            !text.contains("idemgate_request_duration_seconds"),
            "histograms stay made on first use:\n{text}"
        );

        meters.finished(&metrics, Outcome::Mismatch, Duration::from_millis(1));
        let text = String::from_utf8(metrics.render()).expect("utf-8 exposition");
        assert!(
            text.contains("idemgate_requests_total{outcome=\"mismatch\",route=\"charges\"} 1"),
            "{text}"
        );
    }

    /// The series of a route that stays across a reload is never missing
    /// from a scrape taken while the reload sets them; a route gone is.
    #[test]
    fn a_route_kept_by_a_reload_keeps_its_retention_series_throughout() {
        let metrics = Metrics::new(Registry::new()).expect("metrics register");
        let day = Duration::from_secs(86_400);
        let (before, after) = (
            [("kept", day), ("gone", day)],
            [("kept", day), ("new", day)],
        );
        metrics.set_route_retentions(&before);
        let kept = "idemgate_route_retention_seconds{route=\"kept\"} 86400";
        let done = std::sync::atomic::AtomicBool::new(false);
        let missing = std::thread::scope(|scope| {
            let scraper = scope.spawn(|| {
                let mut missing = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let text = String::from_utf8(metrics.render()).expect("utf-8 exposition");
                    missing += usize::from(!text.contains(kept));
                }
                missing
            });
            for _ in 0..20_000 {
                metrics.set_route_retentions(&after);
                metrics.set_route_retentions(&before);
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            scraper.join().expect("scraper")
        });
        assert_eq!(missing, 0, "scrapes without the kept route's series");
        metrics.set_route_retentions(&after);
        let text = String::from_utf8(metrics.render()).expect("utf-8 exposition");
        assert!(text.contains(kept), "{text}");
        assert!(text.contains("route=\"new\"} 86400"), "{text}");
        assert!(!text.contains("route=\"gone\""), "{text}");
    }
}

//! Every metric of the gateway, named in one place, registered on a registry
//! that `main` creates and passes down. Label values are bounded: route names
//! and upstream names come from the config, never from requests.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub const REQUESTS_TOTAL: &str = "idemgate_requests_total";
pub const REQUEST_DURATION: &str = "idemgate_request_duration_seconds";
pub const UPSTREAM_DURATION: &str = "idemgate_upstream_duration_seconds";
pub const STORE_DURATION: &str = "idemgate_store_duration_seconds";
pub const STORE_ERRORS: &str = "idemgate_store_errors_total";
pub const CACHE_LOOKUPS: &str = "idemgate_cache_lookups_total";
pub const INFLIGHT: &str = "idemgate_inflight";
pub const RECORDS_SWEPT: &str = "idemgate_records_swept_total";
pub const CONFIG_RELOADS: &str = "idemgate_config_reloads_total";

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
    /// Not in SPEC's list: refused by the route's `max_in_flight`.
    Overloaded,
}

impl Outcome {
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
    pub inflight: IntGaugeVec,
    pub records_swept: IntCounter,
    pub config_reloads: IntCounterVec,
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
            inflight: IntGaugeVec::new(
                Opts::new(INFLIGHT, "Keyed requests currently executing, by route."),
                &["route"],
            )?,
            records_swept: IntCounter::new(RECORDS_SWEPT, "Expired records deleted.")?,
            config_reloads: IntCounterVec::new(
                Opts::new(CONFIG_RELOADS, "Configuration reloads by result."),
                &["result"],
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
        r.register(Box::new(metrics.inflight.clone()))?;
        r.register(Box::new(metrics.records_swept.clone()))?;
        r.register(Box::new(metrics.config_reloads.clone()))?;
        // Pre-create the label-less series so they read 0 rather than being absent.
        for result in ["ok", "rejected"] {
            metrics.config_reloads.with_label_values(&[result]);
        }
        for result in ["hit", "miss", "error"] {
            metrics.cache_lookups.with_label_values(&[result]);
        }
        Ok(metrics)
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

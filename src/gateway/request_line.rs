//! The one log line a request gets (docs/operating.md, Logs): written by
//! `handle` once its answer is ready, for a head refused before it became a
//! request, and by a keyed execution whose client left before its answer,
//! which ran and was recorded all the same.

use std::net::SocketAddr;
use std::time::Duration;

use http::HeaderValue;

use crate::metrics::Outcome;

pub(crate) struct RequestLine<'a> {
    pub route: &'a str,
    pub upstream: &'a str,
    pub method: &'a str,
    /// The peer of the client's connection (`ClientInfo::addr`): what a
    /// firewall or a load balancer logs it as, never what the client says
    /// of itself (`X-Forwarded-For`).
    pub client: SocketAddr,
    pub status: u16,
    pub outcome: Option<Outcome>,
    /// The raw key: only its short hash is written.
    pub key: Option<&'a str>,
    pub latency: Duration,
    /// With regions, a keyed request's home: where it was sent, or here.
    pub home_region: Option<&'a str>,
    pub request_id: Option<&'a HeaderValue>,
    /// The client was gone before its answer: nobody was answered (and
    /// nothing counted), but the upstream ran and its answer was recorded.
    pub client_left: bool,
}

impl RequestLine<'_> {
    pub fn write(&self) {
        tracing::info!(
            // The target the line has always had, which log filters name.
            target: "idemgate::gateway",
            route = self.route,
            upstream = self.upstream,
            method = self.method,
            // `127.0.0.1:51234`, `[::1]:51234`: formatted only when written.
            client = %self.client,
            status = self.status,
            outcome = self.outcome.map_or("-", Outcome::as_str),
            // Evaluated only when the line is written.
            key = self
                .key
                .map(crate::key::short_hash)
                .as_deref()
                .unwrap_or("-"),
            // Whole microseconds: `1.809`, not `1.8094700000000001`.
            latency_ms = self.latency.as_micros() as f64 / 1000.0,
            home_region = self.home_region,
            request_id = self
                .request_id
                .and_then(|id| id.to_str().ok())
                .unwrap_or("-"),
            client_left = self.client_left.then_some(true),
            "request"
        );
    }
}

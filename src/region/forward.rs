//! A keyed request whose home is another region: sent there whole, its
//! answer returned as it came. Nothing is recorded here: the home region's
//! gateway does the idempotency work against its own store.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http::request::Parts;

use super::Home;
use super::headers::{FORWARDED_FROM, REGION_TOKEN};
use super::via;
use crate::answer::Answer;
use crate::body;
use crate::client_info::ClientInfo;
use crate::error::{GatewayError, INCOMPLETE_BODY};
use crate::log_limit::LogLimit;
use crate::metrics::{Metrics, Outcome, REGION_FORWARDS};
use crate::proxy::{Handover, UpstreamError, Wait, prepare_request};

/// `idemgate_region_forwards_total{result}`: answered by the home region;
/// the home region not reached, or its answer not received (no answer head
/// in time, the connection broken, a small body stalled or cut), or the
/// request came back to a gateway it had passed through (a loop).
pub const RESULTS: [&str; 2] = [OK, UNAVAILABLE];
const OK: &str = "ok";
const UNAVAILABLE: &str = "unavailable";

/// How long a client is told to wait before retrying an unreachable home.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Sends the request to its home region's gateway with the two region
/// headers and this gateway's `Via` entry; the client's own headers
/// (`Authorization` and `Via` included), target and `Host` go on unchanged,
/// so the home region finds the same route, scope, key and fingerprint. A
/// request whose `Via` shows it passed through this gateway already is not
/// sent again.
pub async fn forward(
    home: Home<'_>,
    mut head: Parts,
    body: Bytes,
    client: &ClientInfo,
    metrics: &Metrics,
) -> Answer {
    let count = |result: &str| {
        metrics
            .region_forwards
            .with_label_values(&[&**home.name, result])
            .inc();
    };
    let regions = home.regions;
    if via::passed_through(&head.headers, &regions.via) {
        // It came back only if a gateway on the way did not take the forward
        // as a region's (a valid token means "handle here") and sent it on
        // by a home of its own: the regions disagree on both counts.
        // Every key homed there loops until the regions' configs agree.
        static LIMIT: LogLimit = LogLimit::new(REGION_FORWARDS);
        if let Some(left_out) = LIMIT.admit(home.name) {
            tracing::error!(
                region = %regions.this,
                home = %home.name,
                not_logged = left_out.count(),
                "forwarding loop: a keyed request this gateway forwarded came back, and would go to {home} again. \
                 Region {this} and region {home} (or a region between them) do not share the region token, \
                 and compute different homes for the key (their [regions] names, gateway addresses, or route and scope rules differ); \
                 answered home-region-unavailable, nothing run{left_out}",
                home = home.name,
                this = regions.this,
            );
        }
        count(UNAVAILABLE);
        return Answer::error(GatewayError::RegionLoop {
            retry_after: RETRY_AFTER,
        })
        .with_home(home.name.clone());
    }
    let received = head.version;
    if prepare_request(&mut head, home.gateway, client, true).is_err() {
        return Answer::error(GatewayError::BadRequest(
            "the request target cannot be forwarded",
        ))
        .with_home(home.name.clone());
    }
    head.headers
        .insert(FORWARDED_FROM, regions.from_value.clone());
    head.headers
        .insert(REGION_TOKEN, regions.token_value.clone());
    via::append(&mut head.headers, received, &regions.via);
    let sent = home
        .gateway
        .send(
            Request::from_parts(head, body::full(body)),
            Wait::Whole,
            &Handover::default(),
        )
        .await;
    // Every failure of this hop is 503 `home-region-unavailable`, sent or
    // not: nothing is recorded here, and the home region holds the key's
    // record and does the idempotency work, so a retry that reaches it gets
    // the stored answer (replayed), `key-in-flight` while it still runs, or a
    // first run if the request never got there. Retrying is always safe.
    let unavailable = |why: &str, detail: &dyn std::fmt::Display| {
        // A home region that is down fails every request sent its way.
        static LIMIT: LogLimit = LogLimit::new(REGION_FORWARDS);
        if let Some(left_out) = LIMIT.admit(home.name) {
            tracing::warn!(region = %home.name, %detail, not_logged = left_out.count(),
                "{why}; answered home-region-unavailable, nothing run here{left_out}");
        }
        count(UNAVAILABLE);
        Answer::error(GatewayError::HomeRegionUnavailable {
            retry_after: RETRY_AFTER,
        })
    };
    let answer = match sent {
        Err(UpstreamError::NotSent(detail)) => unavailable("home region unreachable", &detail),
        // Not here: this hop is never given up on.
        Err(error @ UpstreamError::GivenUp) => unavailable("home region unreachable", &error),
        // Not expected: the body is whole before it is forwarded. The home
        // region had at most part of a request, which it does not run.
        Err(UpstreamError::RequestBody(detail)) => {
            tracing::warn!(region = %home.name, %detail, "request body failed while forwarding to the home region");
            count(UNAVAILABLE);
            Answer::error(INCOMPLETE_BODY)
        }
        Err(error @ UpstreamError::Timeout) => {
            unavailable("home region sent no answer head in time", &error)
        }
        Err(UpstreamError::Broken(detail)) => unavailable(
            "connection to the home region broke before its answer head",
            &detail,
        ),
        Ok(response) => {
            // As a pass-through answer: a small body read whole, a larger
            // one streamed. A small one that stalls or breaks has given the
            // client nothing yet: a failed hop like a late head. A streamed
            // one that breaks later cuts the client's connection after its
            // status went out, and stays counted `ok` (the home answered).
            let (parts, incoming) = response.into_parts();
            match body::coalesce(incoming).await {
                Ok(body) => {
                    count(OK);
                    Answer::new(http::Response::from_parts(parts, body), Outcome::Forwarded)
                }
                Err(error) if body::is_stalled(&error) => unavailable(
                    "the home region's answer body stalled before it was whole",
                    &error,
                ),
                Err(error) => unavailable(
                    "the home region's answer body broke before it was whole",
                    &error,
                ),
            }
        }
    };
    answer.with_home(home.name.clone())
}

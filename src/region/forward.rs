//! A keyed request whose home is another region: sent there whole, its
//! answer returned as it came. Nothing is recorded here: the home region's
//! gateway does the idempotency work against its own store.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http::request::Parts;

use super::Home;
use super::headers::{FORWARDED_FROM, REGION_TOKEN};
use crate::answer::Answer;
use crate::body;
use crate::client_info::ClientInfo;
use crate::error::{GatewayError, INCOMPLETE_BODY};
use crate::metrics::{Metrics, Outcome};
use crate::proxy::{UpstreamError, Wait, prepare_request};

/// `idemgate_region_forwards_total{result}`: answered by the home region;
/// nothing sent (the home region unreachable); sent, then no complete
/// answer (the home region may have run it).
pub const RESULTS: [&str; 3] = [OK, UNAVAILABLE, OUTCOME_UNKNOWN];
const OK: &str = "ok";
const UNAVAILABLE: &str = "unavailable";
const OUTCOME_UNKNOWN: &str = "outcome_unknown";

/// How long a client is told to wait before retrying an unreachable home.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Sends the request to its home region's gateway with the two region
/// headers; the client's own headers (`Authorization` included), target
/// and `Host` go on unchanged, so the home region finds the same route,
/// scope, key and fingerprint.
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
    if prepare_request(&mut head, home.gateway, client, true).is_err() {
        return Answer::error(GatewayError::BadRequest(
            "the request target cannot be forwarded",
        ))
        .with_home(home.name.clone());
    }
    head.headers
        .insert(FORWARDED_FROM, home.regions.from_value.clone());
    head.headers
        .insert(REGION_TOKEN, home.regions.token_value.clone());
    let sent = home
        .gateway
        .send(Request::from_parts(head, body::full(body)), Wait::Whole)
        .await;
    let answer = match sent {
        Err(UpstreamError::NotSent(detail)) => {
            tracing::warn!(region = %home.name, %detail, "home region unreachable; nothing run");
            count(UNAVAILABLE);
            Answer::error(GatewayError::HomeRegionUnavailable {
                retry_after: RETRY_AFTER,
            })
        }
        // Not expected: the body is whole before it is forwarded. The home
        // region had at most part of a request, which it does not run.
        Err(UpstreamError::RequestBody(detail)) => {
            tracing::warn!(region = %home.name, %detail, "request body failed while forwarding to the home region");
            count(UNAVAILABLE);
            Answer::error(INCOMPLETE_BODY)
        }
        Err(UpstreamError::Timeout) => {
            tracing::warn!(region = %home.name, "home region did not answer in time; outcome unknown");
            count(OUTCOME_UNKNOWN);
            Answer::error(GatewayError::OutcomeUnknownTimeout)
        }
        Err(UpstreamError::Broken(detail)) => {
            tracing::warn!(region = %home.name, %detail, "connection to the home region broke after sending; outcome unknown");
            count(OUTCOME_UNKNOWN);
            Answer::error(GatewayError::OutcomeUnknownBroken)
        }
        Ok(response) => {
            // As a pass-through answer: a small body read whole, a larger
            // one streamed. A small one that stalls or breaks is an unknown
            // outcome, as a late or broken head is.
            let (parts, incoming) = response.into_parts();
            match body::coalesce(incoming).await {
                Ok(body) => {
                    count(OK);
                    Answer::new(http::Response::from_parts(parts, body), Outcome::Forwarded)
                }
                Err(error) if body::is_stalled(&error) => {
                    count(OUTCOME_UNKNOWN);
                    Answer::error(GatewayError::OutcomeUnknownTimeout)
                }
                Err(_) => {
                    count(OUTCOME_UNKNOWN);
                    Answer::error(GatewayError::OutcomeUnknownBroken)
                }
            }
        }
    };
    answer.with_home(home.name.clone())
}

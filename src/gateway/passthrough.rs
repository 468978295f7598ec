//! Requests no idempotency rule applies to: a plain streaming reverse proxy.

use std::time::Instant;

use crate::body::ClientBody;
use http::{Request, Response};

use super::{Exchange, Gateway};
use crate::answer::Answer;
use crate::body::{self, Body};
use crate::error::{GatewayError, INCOMPLETE_BODY};
use crate::log_limit::LogLimit;
use crate::metrics::{Outcome, REQUESTS_TOTAL};
use crate::proxy::{Handover, UpstreamBody, UpstreamError, Wait, prepare_request};

pub async fn run(gateway: &Gateway, exchange: &Exchange, request: Request<ClientBody>) -> Answer {
    let (parts, incoming) = request.into_parts();
    let body = match body::coalesce_request(incoming, gateway.body_limits, &gateway.body_budget)
        .await
    {
        Ok(body) => body,
        Err(error) if error.is::<body::Exhausted>() => {
            return Answer::error(GatewayError::BodiesOverBudget);
        }
        Err(error) => {
            return Answer::error(
                body::SlowBody::of(&error).map_or(INCOMPLETE_BODY, GatewayError::RequestTimeout),
            );
        }
    };
    let request = Request::from_parts(parts, body);
    match forward(gateway, exchange, request).await {
        Ok(response) => Answer::new(response, Outcome::Passthrough),
        Err(error) => Answer::error(error),
    }
}

/// Forwards `request` unchanged but for the proxy headers, streaming both bodies.
pub async fn forward(
    gateway: &Gateway,
    exchange: &Exchange,
    request: Request<Body>,
) -> Result<Response<Body>, GatewayError> {
    let (mut parts, body) = request.into_parts();
    let route = exchange.route();
    prepare_request(
        &mut parts,
        exchange.upstream(),
        &exchange.client,
        route.preserve_host,
    )
    .map_err(|_| GatewayError::BadRequest("the request target cannot be forwarded"))?;
    let started = Instant::now();
    let result = exchange
        .upstream()
        // Never given up on: only a keyed execution is cut off by a
        // shutdown.
        .send(
            Request::from_parts(parts, body),
            Wait::Restarting,
            &Handover::default(),
        )
        .await;
    observe_upstream(gateway, exchange, started);
    match result {
        Ok(response) => relay_response(response).await,
        Err(UpstreamError::NotSent(detail)) => {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            if let Some(left_out) = LIMIT.admit(&route.name) {
                let upstream = exchange.upstream();
                tracing::warn!(route = %route.name, upstream = upstream.name(),
                    upstream_addr = %upstream.address(), %detail,
                    not_logged = left_out.count(), "upstream unreachable{left_out}");
            }
            Err(GatewayError::UpstreamUnreachable)
        }
        // Not here (see the `Handover` above): nothing was sent.
        Err(UpstreamError::GivenUp) => Err(GatewayError::NotSentShutdown),
        Err(UpstreamError::Timeout) => Err(GatewayError::UpstreamTimeout),
        Err(UpstreamError::RequestBody(detail)) => {
            tracing::debug!(route = %route.name, %detail, "request body cut short by the client");
            Err(INCOMPLETE_BODY)
        }
        Err(UpstreamError::Broken(detail)) => {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            if let Some(left_out) = LIMIT.admit(&route.name) {
                let upstream = exchange.upstream();
                tracing::warn!(route = %route.name, upstream = upstream.name(),
                    upstream_addr = %upstream.address(), %detail,
                    not_logged = left_out.count(), "upstream connection broke{left_out}");
            }
            Err(GatewayError::UpstreamError)
        }
    }
}

pub fn observe_upstream(gateway: &Gateway, exchange: &Exchange, started: Instant) {
    exchange
        .meters()
        .upstream_answered(gateway.metrics(), started.elapsed());
}

/// The upstream's answer as the client gets it (its hop-by-hop headers are
/// gone already): a small body read whole (one write to the client), a
/// larger one streamed. A small body that stalls is a timeout (504), as a
/// late head is; a streamed one that stalls cuts the client's connection.
async fn relay_response(response: Response<UpstreamBody>) -> Result<Response<Body>, GatewayError> {
    let (parts, incoming) = response.into_parts();
    match body::coalesce(incoming).await {
        Ok(body) => Ok(Response::from_parts(parts, body)),
        Err(error) if body::is_stalled(&error) => Err(GatewayError::UpstreamTimeout),
        Err(_) => Err(GatewayError::UpstreamError),
    }
}

/// The upstream's answer as the client gets it, the body streamed as it arrives.
pub fn stream_response(response: Response<UpstreamBody>) -> Response<Body> {
    response.map(body::stream)
}

//! A request on an idempotent route whose method the policy covers.

use std::sync::Arc;

use crate::body::ClientBody;
use http::header::HeaderValue;
use http::{Request, Response};

use super::execute::{Execution, Slot};
use super::passthrough;
use super::replay;
use super::request_key::{self, KeyedRequest};
use super::reserve::{self, Decision};
use super::{Exchange, Gateway, answer_headers, identity};
use crate::answer::Answer;
use crate::body;
use crate::config::StoreErrorMode;
use crate::error::GatewayError;
use crate::key::{self, KeySource};
use crate::log_limit::LogLimit;
use crate::metrics::{Outcome, STORE_ERRORS};
use crate::proxy::prepare_request;
use crate::route::RoutePolicy;
use crate::store::{Damaged, LeaseGuard, RecordId, StoreError};

pub async fn run(
    gateway: &Arc<Gateway>,
    exchange: Exchange,
    policy: &RoutePolicy,
    request: Request<ClientBody>,
) -> Answer {
    let (mut head, incoming) = request.into_parts();
    let (key, body, derived) =
        match request_key::extract(policy, &head, incoming, gateway.reading()).await {
            // A body left unread closes an HTTP/1 connection, and its answer
            // says so (server::http1).
            Err(error) => return Answer::error(error),
            // Not boxed like `degraded` below, though it makes every keyed
            // request's future larger: a key-less request would then pay an
            // allocation of its own (docs/adr/0007-hot-path-costs.md).
            Ok(KeyedRequest::Unkeyed { body }) => {
                return match passthrough::forward(
                    gateway,
                    &exchange,
                    Request::from_parts(head, body),
                )
                .await
                {
                    Ok(mut response) => {
                        replay::unmark(response.headers_mut(), policy.replay_header.name());
                        answer_headers::expiry(response.headers_mut(), policy, None);
                        Answer::new(response, Outcome::Passthrough)
                    }
                    Err(error) => Answer::error(error),
                };
            }
            Ok(KeyedRequest::Keyed { key, body, derived }) => (key, body, derived),
        };
    let id = RecordId {
        route: exchange.route().name.clone(),
        scope: identity::scope(policy, &head, &exchange.client),
        key: Arc::from(key),
    };
    // The home is known once route, scope and key are: a key whose home is
    // another region is sent there whole, before anything is reserved here.
    if let Some(home) = exchange.region.as_ref().and_then(|hop| hop.elsewhere(&id)) {
        let forwarded =
            crate::region::forward(home, head, body, &exchange.client, gateway.metrics());
        let mut answer = forwarded.await;
        // The home region tells a derived key on its own answers; the 503 of
        // a hop that failed is this gateway's, and tells it too.
        if derived
            && answer.outcome != Some(Outcome::Forwarded)
            && let Some(value) = answer_headers::derived_key(&id.key)
        {
            answer
                .response
                .headers_mut()
                .insert(answer_headers::IDEMPOTENCY_KEY, value);
        }
        return answer.with_key(id.key);
    }
    let fingerprint = identity::fingerprint(policy, &head, &body);
    // Whichever way the request goes on from here (executed, or forwarded
    // without a record when the store is down), the key stays behind; a
    // derived key goes on as the client's would have.
    let derived = derived
        .then(|| answer_headers::derived_key(&id.key))
        .flatten();
    if !policy.forward_key {
        let webhook = exchange.route().webhook.as_ref();
        for source in &policy.key {
            if let KeySource::Header(name) = source
                && !webhook.is_some_and(|verifier| verifier.signs(name))
            {
                head.headers.remove(name);
            }
        }
    } else if let Some(value) = &derived {
        head.headers
            .insert(answer_headers::IDEMPOTENCY_KEY, value.clone());
    }
    let mut answer = under_key(gateway, exchange, policy, head, body, id, &fingerprint).await;
    // The client, and the operator, can find the record of a derived key.
    if let Some(value) = derived {
        answer
            .response
            .headers_mut()
            .insert(answer_headers::IDEMPOTENCY_KEY, value);
    }
    answer
}

/// Reserve, then execute or replay: every answer given under the key.
async fn under_key(
    gateway: &Arc<Gateway>,
    exchange: Exchange,
    policy: &RoutePolicy,
    mut head: http::request::Parts,
    body: bytes::Bytes,
    id: RecordId,
    fingerprint: &str,
) -> Answer {
    // Answers not yet taken by their clients hold the body budget past its
    // bound: no new request is let in until they are (docs/behaviour.md, "Memory").
    if gateway.body_budget.is_over() {
        return Answer::error(GatewayError::BodiesOverBudget).with_key(id.key);
    }
    let answer = match reserve::reserve(gateway, policy, &id, fingerprint).await {
        Ok(Decision::Replay(mut stored, expires_at)) => {
            // Held until the client has taken it: past the budget's bound a
            // replay is refused (nothing runs), and its retry replays. One
            // buffer other replays hold already is counted once.
            match gateway
                .body_budget
                .hold_replay(std::mem::take(&mut stored.body))
            {
                Ok(held) => stored.body = held,
                Err(_) => {
                    return Answer::error(GatewayError::BodiesOverBudget).with_key(id.key);
                }
            }
            let mut response = replay::replayed(&stored, policy);
            answer_headers::expiry(response.headers_mut(), policy, expires_at);
            Answer::new(response, Outcome::Replayed)
        }
        Ok(Decision::Mismatch) => Answer::error(GatewayError::FingerprintMismatch),
        Ok(Decision::Conflict { retry_after }) => {
            Answer::error(GatewayError::KeyInFlight { retry_after })
        }
        Ok(Decision::Execute(lease)) => {
            let guard = LeaseGuard::new(gateway.store().clone(), lease);
            let Some(slot) = Slot::take(exchange.route(), policy.max_in_flight) else {
                // Freed at once, so the client's retry is not told "in flight".
                if let Err(error) = guard.release().await {
                    tracing::warn!(route = %id.route, %error, "releasing a refused key failed");
                }
                gateway.waiters.wake(&id);
                return Answer::error(GatewayError::RouteOverloaded {
                    retry_after: std::time::Duration::from_secs(1),
                })
                .with_key(id.key);
            };
            let route = exchange.route();
            if prepare_request(
                &mut head,
                exchange.upstream(),
                &exchange.client,
                route.preserve_host,
            )
            .is_err()
            {
                // Dropping the guard frees the key.
                return Answer::error(GatewayError::BadRequest(
                    "the request target cannot be forwarded",
                ));
            }
            let logged_key = id.key.clone();
            return Execution {
                slot,
                gateway: gateway.clone(),
                exchange,
                id,
                guard,
                head,
                body,
            }
            .spawn()
            .await
            .with_key(logged_key);
        }
        // Never forwarded, whatever `on_store_error` says: the record
        // exists, so the request may have run (logged by the store).
        Err(StoreError::Sealed(_)) => Answer::error(GatewayError::StoredAnswerSealed),
        Err(StoreError::Damaged(damaged)) => {
            warn_damaged(&id, damaged);
            Answer::error(GatewayError::StoredAnswerDamaged)
        }
        Err(error) => {
            warn_store_unavailable(&id, &error);
            match policy.on_store_error {
                StoreErrorMode::Reject => Answer::error(GatewayError::StoreUnavailable {
                    retry_after: std::time::Duration::from_secs(1),
                    refusal: error.refusal(),
                }),
                StoreErrorMode::Pass => {
                    // Boxed: a rare path, which inline would make every
                    // request's future (allocated and copied) larger.
                    let request = Request::from_parts(head, body::full(body));
                    Box::pin(degraded(gateway, &exchange, policy, request)).await
                }
            }
        }
    };
    answer.with_key(id.key)
}

/// The store cannot be reached and the route prefers availability: forward
/// without a record, and say so on the answer, the gateway's own too (502
/// or 504 when the upstream failed): with no record, a retry of it runs
/// again, which is what the marker tells the client.
async fn degraded(
    gateway: &Gateway,
    exchange: &Exchange,
    policy: &RoutePolicy,
    request: Request<body::Body>,
) -> Answer {
    match passthrough::forward(gateway, exchange, request).await {
        Ok(mut response) => {
            replay::unmark(response.headers_mut(), policy.replay_header.name());
            answer_headers::expiry(response.headers_mut(), policy, None);
            mark_degraded(&mut response);
            Answer::new(response, Outcome::Degraded)
        }
        Err(error) => {
            let mut answer = Answer::error(error);
            mark_degraded(&mut answer.response);
            answer
        }
    }
}

fn mark_degraded<B>(response: &mut Response<B>) {
    response
        .headers_mut()
        .insert(replay::DEGRADED, HeaderValue::from_static("true"));
}

/// Logs a record the store cannot read, per route at once and then once per
/// interval (crate::log_limit): every retry of its key meets it again until
/// an operator purges it.
fn warn_damaged(id: &RecordId, damaged: Damaged) {
    static LIMIT: LogLimit = LogLimit::new(STORE_ERRORS);
    if let Some(left_out) = LIMIT.admit(&id.route) {
        tracing::error!(route = %id.route, key = %key::short_hash(&id.key), %damaged,
            not_logged = left_out.count(),
            "stored answer cannot be read; nothing forwarded; purge the key once reconciled{left_out}");
    }
}

/// Logs a request refused (or degraded) for want of the store, per route at
/// once and then once per interval with the count left out
/// (crate::log_limit): a store that is down fails every keyed request, and
/// each already has its own access-log line (`outcome="store_unavailable"`,
/// or `"degraded"` when forwarded) and is counted in
/// `idemgate_store_errors_total`.
fn warn_store_unavailable(id: &RecordId, error: &StoreError) {
    static LIMIT: LogLimit = LogLimit::new(STORE_ERRORS);
    if let Some(left_out) = LIMIT.admit(&id.route) {
        tracing::warn!(route = %id.route, key = %key::short_hash(&id.key), %error,
            not_logged = left_out.count(), "store unavailable{left_out}");
    }
}

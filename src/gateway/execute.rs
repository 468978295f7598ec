//! Phase "execute": the one forwarding of a reserved key, and the recording
//! of its outcome.
//!
//! It runs in its own task so that a client that goes away (the connection
//! drops the handler's future) cancels neither the upstream call nor the recording: the
//! client's retry then finds the answer instead of running the request again.
//! Only the end of a shutdown's grace cuts it off, and what it knows then is
//! recorded: 504 outcome-unknown (`GatewayError::OutcomeUnknownShutdown`)
//! once the request went out, its key freed while it still waited for a
//! connection or a stream (`cut_off_fate`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::Request;
use http::request::Parts;
use tokio::sync::oneshot;

use super::capture::{self, Captured};
use super::passthrough::{observe_upstream, stream_response};
use super::replay;
use super::request_line::RequestLine;
use super::{Exchange, Gateway, request_ids};
use crate::answer::Answer;
use crate::body;
use crate::error::{GatewayError, INCOMPLETE_BODY, PROBLEM_JSON};
use crate::log_limit::LogLimit;
use crate::metrics::{Outcome, REQUESTS_TOTAL};
use crate::proxy::{Handover, UpstreamError, Wait};
use crate::route::{Route, RoutePolicy};
use crate::store::{LeaseGuard, RecordId, StoreError, StoredResponse};
use crate::wire::fields::TransferCodings;

/// One of a route's `max_in_flight` places, held for the whole execution.
pub struct Slot(Arc<Route>);

impl Slot {
    /// `None` when the route's limit is reached (0 = no limit).
    pub fn take(route: &Arc<Route>, max: usize) -> Option<Slot> {
        let before = route.executing.fetch_add(1, Ordering::SeqCst);
        if max > 0 && before >= max {
            route.executing.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(route.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.executing.fetch_sub(1, Ordering::SeqCst);
    }
}

pub struct Execution {
    pub gateway: Arc<Gateway>,
    pub slot: Slot,
    pub exchange: Exchange,
    pub id: RecordId,
    pub guard: LeaseGuard,
    /// The request head, already prepared for the upstream.
    pub head: Parts,
    pub body: Bytes,
}

/// What the log line of an execution whose client left names, taken
/// before it runs (`RequestLine`; nothing is counted: docs/operating.md,
/// "How the metrics add up").
struct Unanswered {
    route: Arc<Route>,
    method: http::Method,
    client: std::net::SocketAddr,
    key: Arc<str>,
    request_id: Option<http::HeaderValue>,
    home_region: Option<Arc<str>>,
    started: Instant,
}

impl Unanswered {
    fn of(execution: &Execution) -> Self {
        let exchange = &execution.exchange;
        Self {
            route: exchange.route().clone(),
            method: execution.head.method.clone(),
            client: exchange.client.addr,
            key: execution.id.key.clone(),
            request_id: execution
                .head
                .headers
                .get(request_ids::X_REQUEST_ID)
                .cloned(),
            home_region: (exchange.region.as_ref()).map(|hop| hop.regions.this().clone()),
            started: exchange.started,
        }
    }

    fn write(&self, answer: &Answer) {
        RequestLine {
            route: &self.route.name,
            upstream: &self.route.upstream,
            method: self.method.as_str(),
            client: self.client,
            status: answer.response.status().as_u16(),
            outcome: answer.outcome,
            key: Some(&self.key),
            latency: self.started.elapsed(),
            home_region: self.home_region.as_deref(),
            request_id: self.request_id.as_ref(),
            client_left: true,
        }
        .write();
    }
}

impl Execution {
    /// Starts the execution detached from the caller and waits for its answer.
    pub async fn spawn(self) -> Answer {
        let (answered, answer) = oneshot::channel();
        // Boxed first: tokio moves a spawned future by value through several
        // calls before it rests in its task, and this one is ~3 KB; a box is
        // one copy, then a pointer moves (docs/adr/0007-hot-path-costs.md).
        // Tracked: a shutdown waits for it even once its client is gone.
        let executions = self.gateway.executions();
        executions.spawn(Box::pin(async move {
            let unanswered = Unanswered::of(&self);
            let answer = self.run().await;
            // The caller is gone (its client left): the request that ran
            // still gets its log line here.
            if let Err(answer) = answered.send(answer) {
                unanswered.write(&answer);
            }
        }));
        // Closed unanswered: a panic inside; the guard released the key,
        // nothing more is known.
        (answer.await).unwrap_or_else(|_| Answer::error(GatewayError::UpstreamError))
    }

    async fn run(self) -> Answer {
        let Execution {
            slot: _slot,
            gateway,
            exchange,
            id,
            guard,
            head,
            body,
        } = self;
        let Some(policy) = exchange.route().policy.as_ref() else {
            return Answer::error(GatewayError::UpstreamError);
        };
        let _executing = exchange.meters().executing(gateway.metrics());
        let record = Recorder {
            gateway: &gateway,
            id: &id,
            policy,
        };

        let cut_off = gateway.cut_off();
        // Once cut off, nothing more goes out, even when the connection or
        // stream this one waits for comes free on the poll below.
        let handover = Handover::unless(cut_off.clone());
        // Polled first: a fate already settled is recorded as it is.
        let fate = tokio::select! {
            biased;
            fate = fetch(&gateway, &exchange, &id, policy, head, body, &handover) => fate,
            () = cut_off.cancelled() => cut_off_fate(&id, handover.happened()),
        };
        match fate {
            Fate::Freed(error) => {
                record.release(guard).await;
                Answer::error(error)
            }
            Fate::Unknown(error) => record.outcome_unknown(guard, error).await,
            Fate::Released(response) => {
                record.release(guard).await;
                let mut response = stream_response(*response);
                replay::drop_gateway_fields(response.headers_mut());
                super::answer_headers::expiry(response.headers_mut(), policy, None);
                replay::mark(
                    response.headers_mut(),
                    policy.replay_header.name(),
                    &policy.replay_values.fresh,
                );
                Answer::new(response, Outcome::Released)
            }
            Fate::Answered(captured) => record.answered(guard, captured).await,
        }
    }
}

/// What became of a request at the upstream, before anything is recorded.
enum Fate {
    /// Not sent, or not whole: the key is freed.
    Freed(GatewayError),
    /// A `release_statuses` answer, streamed on without being stored.
    /// Boxed: the rare case, and an answer body holds its upstream
    /// connection, which would make every `Fate` that large.
    Released(Box<http::Response<crate::proxy::UpstreamBody>>),
    /// Sent, and no answer that can be stored came back.
    Unknown(GatewayError),
    Answered(Captured),
}

/// The shutdown's grace ended before the request's fate was settled. Sent,
/// it is unknown: recorded so, its retry does not run it again. Still
/// waiting for a connection or a stream, the upstream never had it, and
/// the fetch stops here: the key is freed, so its retry runs it once, on
/// the next process, rather than leaving it to an operator to reconcile.
fn cut_off_fate(id: &RecordId, sent: bool) -> Fate {
    let key = crate::key::short_hash(&id.key);
    if sent {
        tracing::warn!(route = %id.route, %key, "shutdown: the grace ended before the upstream answered; recording it as outcome-unknown");
        Fate::Unknown(GatewayError::OutcomeUnknownShutdown)
    } else {
        tracing::warn!(route = %id.route, %key, "shutdown: the grace ended before the request was sent to the upstream; key freed");
        Fate::Freed(GatewayError::NotSentShutdown)
    }
}

/// Sends the request and reads the answer to be stored, within the
/// upstream's timeout; `handover` tells whether it went out, and stops it
/// once the shutdown cut it off.
async fn fetch(
    gateway: &Gateway,
    exchange: &Exchange,
    id: &RecordId,
    policy: &RoutePolicy,
    head: Parts,
    body: Bytes,
    handover: &Handover,
) -> Fate {
    let started = Instant::now();
    let sent = exchange
        .upstream()
        // One deadline for the whole exchange: the lease outlasts it.
        .send(
            Request::from_parts(head, body::full(body)),
            Wait::Whole,
            handover,
        )
        .await;
    observe_upstream(gateway, exchange, started);
    match sent {
        Err(UpstreamError::NotSent(detail)) => {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            if let Some(left_out) = LIMIT.admit(&id.route) {
                let upstream = exchange.upstream();
                tracing::warn!(route = %id.route, upstream = upstream.name(),
                    upstream_addr = %upstream.address(), %detail,
                    not_logged = left_out.count(), "upstream unreachable; key freed{left_out}");
            }
            Fate::Freed(GatewayError::UpstreamUnreachable)
        }
        Err(UpstreamError::GivenUp) => cut_off_fate(id, false),
        // Not expected: a keyed body is read whole before its key is
        // reserved. The upstream had at most part of a request.
        Err(UpstreamError::RequestBody(detail)) => {
            tracing::warn!(route = %id.route, %detail, "request body failed while forwarding; key freed");
            Fate::Freed(INCOMPLETE_BODY)
        }
        Err(UpstreamError::Timeout) => Fate::Unknown(GatewayError::OutcomeUnknownTimeout),
        Err(UpstreamError::Broken(detail)) => {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            if let Some(left_out) = LIMIT.admit(&id.route) {
                let upstream = exchange.upstream();
                tracing::warn!(route = %id.route, upstream = upstream.name(),
                    upstream_addr = %upstream.address(), %detail,
                    not_logged = left_out.count(),
                    "upstream connection broke after sending{left_out}");
            }
            Fate::Unknown(GatewayError::OutcomeUnknownBroken)
        }
        Ok(response) if policy.releases(response.status().as_u16()) => {
            Fate::Released(Box::new(response))
        }
        // Stored, the answer would lose the coding its body still
        // carries (the store keeps no transfer codings, and a replay may
        // go to any client): the request ran, and what it returned
        // cannot be kept faithfully.
        Ok(response) if response.extensions().get::<TransferCodings>().is_some() => {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            if let Some(left_out) = LIMIT.admit(&id.route) {
                tracing::warn!(route = %id.route, upstream = exchange.upstream().name(), not_logged = left_out.count(),
                    "the upstream's answer has a transfer coding besides chunked, which cannot be stored; recorded as outcome-unknown{left_out}");
            }
            Fate::Unknown(GatewayError::OutcomeUnknownBroken)
        }
        Ok(response) => {
            let remaining = exchange
                .upstream()
                .timeout()
                .saturating_sub(started.elapsed());
            let limit = exchange.max_stored_response;
            match tokio::time::timeout(remaining, capture::capture(response, limit)).await {
                Err(_) => Fate::Unknown(GatewayError::OutcomeUnknownTimeout),
                // A body stalled for `timeout` timed out, as the
                // deadline above would say a moment later.
                Ok(Err(error)) if crate::body::is_stalled(&error) => {
                    Fate::Unknown(GatewayError::OutcomeUnknownTimeout)
                }
                Ok(Err(_)) => Fate::Unknown(GatewayError::OutcomeUnknownBroken),
                Ok(Ok(captured)) => Fate::Answered(captured),
            }
        }
    }
}

/// Writes the outcome of one execution and wakes the waiters of its key.
struct Recorder<'a> {
    gateway: &'a Gateway,
    id: &'a RecordId,
    policy: &'a RoutePolicy,
}

impl Recorder<'_> {
    async fn answered(&self, guard: LeaseGuard, captured: Captured) -> Answer {
        let kept = replay::Kept {
            exclude: &self.policy.replay_exclude_headers,
            only: &self.policy.replay_headers,
        };
        let (parts, body, expires_at) = match captured {
            Captured::Whole { mut parts, body } => {
                // Held until the client has taken it; its request ran, so it
                // is never refused, but past the bound no new request is let in.
                let mut share = self.gateway.body_budget.share();
                share.take_past(body.len());
                let body = body::budget::hold_with(body, share);
                replay::drop_gateway_fields(&mut parts.headers);
                let stored = capture::stored(&parts, body.clone(), false, kept);
                let expires_at = self.complete(guard, &stored).await.ok();
                (parts, body::full(body), expires_at)
            }
            Captured::Oversized {
                mut parts,
                prefix,
                rest,
            } => {
                replay::drop_gateway_fields(&mut parts.headers);
                let stored = capture::stored(&parts, Bytes::new(), true, kept);
                let expires_at = self.complete(guard, &stored).await.ok();
                (parts, capture::resume(prefix, *rest), expires_at)
            }
        };
        let mut response = http::Response::from_parts(parts, body);
        replay::mark(
            response.headers_mut(),
            self.policy.replay_header.name(),
            &self.policy.replay_values.fresh,
        );
        super::answer_headers::expiry(response.headers_mut(), self.policy, expires_at);
        Answer::new(response, Outcome::New)
    }

    /// The request was sent and its fate is unknown: the problem is stored like
    /// an answer, so a retry cannot run it a second time.
    async fn outcome_unknown(&self, guard: LeaseGuard, error: GatewayError) -> Answer {
        let stored = stored_problem(&error);
        // Its text promises that retries get it: true only once recorded.
        let (stored, expires_at) = match self.complete(guard, &stored).await {
            Ok(expires_at) => (stored, Some(expires_at)),
            Err(NotRecorded) => {
                let status = error.status();
                (
                    stored_problem(&GatewayError::OutcomeUnrecorded { status }),
                    None,
                )
            }
        };
        let mut response = replay::fresh_from_stored(&stored, self.policy);
        super::answer_headers::expiry(response.headers_mut(), self.policy, expires_at);
        Answer::new(response, Outcome::OutcomeUnknown)
    }

    /// Records the answer; returns the expiry the store wrote, which the
    /// first answer tells exactly as its replays will (`expiry_header`).
    async fn complete(
        &self,
        guard: LeaseGuard,
        stored: &StoredResponse,
    ) -> Result<SystemTime, NotRecorded> {
        let written = guard.complete(stored, self.policy.retention).await;
        match &written {
            Ok(_) => {}
            Err(StoreError::Fenced) => tracing::warn!(
                route = %self.id.route,
                key = %crate::key::short_hash(&self.id.key),
                "answer not recorded: the key was purged, or its lease taken over by another request, while it ran"
            ),
            Err(err) => tracing::error!(
                route = %self.id.route,
                key = %crate::key::short_hash(&self.id.key),
                error = %err,
                "answer not recorded; the key is held until its lease expires"
            ),
        }
        self.gateway.waiters.wake(self.id);
        written.map_err(|_| NotRecorded)
    }

    async fn release(&self, guard: LeaseGuard) {
        if let Err(err) = guard.release().await {
            tracing::warn!(route = %self.id.route, error = %err, "releasing the key failed; retrying in the background while its lease holds");
        }
        self.gateway.waiters.wake(self.id);
    }
}

/// The answer was not written: the store failed, or the lease was taken over.
struct NotRecorded;

/// A gateway's own problem, as it is stored and replayed.
fn stored_problem(error: &GatewayError) -> StoredResponse {
    let (body, link) = error.body_and_link();
    let mut headers = vec![("content-type", Bytes::from_static(PROBLEM_JSON.as_bytes()))];
    if let Some(link) = link {
        headers.push(("link", Bytes::copy_from_slice(link.as_bytes())));
    }
    StoredResponse {
        status: error.status().as_u16(),
        headers: StoredResponse::header_list(headers),
        body: Bytes::from(body),
        body_omitted: false,
        outcome_unknown: true,
    }
}

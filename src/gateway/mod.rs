//! The request path as named phases, each a file here but the route's
//! (`crate::route`): `head_checks` → `route` → `signature` (webhook
//! routes) → (`passthrough` | `idempotent`: `request_key` → `identity` (the
//! scope; a key whose home is another region is forwarded there,
//! `crate::region`; the fingerprint) → `reserve` → `execute` (forward,
//! `capture`, record) | `replay`).
//!
//! `handle` is the one entry point the server calls; it never fails: every
//! error becomes an answer (see [`crate::error`]).

mod answer_headers;
mod capture;
mod execute;
mod head_checks;
mod idempotent;
mod identity;
mod passthrough;
mod replay;
mod request_ids;
mod request_key;
mod request_line;
mod reserve;
mod runtime;
mod runtime_error;
mod signature;
mod stream_head;
mod waiters;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::body::ClientBody;
use arc_swap::ArcSwap;
use http::{Request, Response, Version};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use head_checks::check_framing;
pub(crate) use head_checks::head_over_limits;
use request_line::RequestLine;
use runtime::BoundRoute;
pub use runtime::Runtime;
pub use runtime_error::RuntimeError;

use crate::answer::Answer;
use crate::body::{self, Body, BodyBudget};
use crate::client_info::ClientInfo;
use crate::error::{CONTROL_CHARACTERS, GatewayError};
use crate::key::KeySource;
use crate::log_limit::LogLimit;
use crate::metrics::{Metrics, REQUESTS_TOTAL, RouteMeters};
use crate::proxy::Upstream;
use crate::route::{self, Route};
use crate::store::Store;
use crate::wire::fields::{TransferCodings, UnreadableFields};
use waiters::Waiters;

/// Shared state of the data plane: the swappable config-derived runtime, the
/// store, metrics, and the in-process waiters on in-flight keys.
pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    store: Arc<dyn Store>,
    metrics: Metrics,
    /// Series of requests no route took (label `route=""`).
    unrouted: RouteMeters,
    waiters: Waiters,
    /// How long a body the gateway reads whole may take: each next piece
    /// `server.header_read_timeout`, all of it `server.body_read_timeout`,
    /// as the process started with them.
    body_limits: body::ReadLimits,
    /// Request bodies read whole, heads of HTTP/2 requests in progress and
    /// keyed answers not yet taken by their clients, all requests together (`server.max_buffered_bodies`, as the
    /// process started with it).
    body_budget: BodyBudget,
    /// Keyed executions, detached from their client's request: a shutdown
    /// waits for them (within its grace) after the connections closed, as
    /// an HTTP/2 client's reset or closed stream drops its request but not
    /// the execution, which must still be recorded.
    executions: TaskTracker,
    /// Cancelled when the shutdown's grace is over: executions still at
    /// their upstream stop waiting and record an unknown outcome.
    cut_off: CancellationToken,
}

/// Per-request state every phase reads.
pub(crate) struct Exchange {
    bound: Arc<BoundRoute>,
    pub client: Arc<ClientInfo>,
    pub max_stored_response: u64,
    /// Set when the config has regions (crate::region).
    pub region: Option<crate::region::Hop>,
    /// When the request's head was taken (its latency's start).
    pub started: Instant,
}

impl Exchange {
    pub fn route(&self) -> &Arc<Route> {
        &self.bound.route
    }

    pub fn upstream(&self) -> &Arc<Upstream> {
        &self.bound.upstream
    }

    pub fn meters(&self) -> &RouteMeters {
        &self.bound.meters
    }
}

impl Gateway {
    pub fn new(runtime: Runtime, store: Arc<dyn Store>, metrics: Metrics) -> Self {
        runtime.announce_routes(&metrics);
        crate::error::problem_base::set(runtime.config.server.problem_base.as_deref());
        let server = &runtime.config.server;
        let body_budget = BodyBudget::new(server.max_buffered_bodies);
        let body_limits = body::ReadLimits {
            idle: server.header_read_timeout,
            whole: server.body_read_timeout,
        };
        Self {
            runtime: ArcSwap::from_pointee(runtime),
            store,
            metrics,
            unrouted: RouteMeters::new("", ""),
            waiters: Waiters::default(),
            body_limits,
            body_budget,
            executions: TaskTracker::new(),
            cut_off: CancellationToken::new(),
        }
    }

    /// What a shutdown waits for beside the connections.
    pub fn executions(&self) -> TaskTracker {
        self.executions.clone()
    }

    /// Cancelled by the listener once the shutdown's grace is over.
    pub fn cut_off(&self) -> CancellationToken {
        self.cut_off.clone()
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    /// Swaps in a new runtime; requests already running keep the one they started with.
    pub fn replace_runtime(&self, runtime: Runtime) {
        runtime.announce_routes(&self.metrics);
        crate::error::problem_base::set(runtime.config.server.problem_base.as_deref());
        self.runtime.store(Arc::new(runtime));
    }

    /// How this gateway reads a body whole.
    fn reading(&self) -> request_key::Reading<'_> {
        request_key::Reading {
            limits: self.body_limits,
            budget: &self.body_budget,
        }
    }

    /// Bytes of request bodies and of keyed answers not yet taken held now,
    /// all requests together (`body::budget`).
    pub fn buffered_body_bytes(&self) -> usize {
        self.body_budget.held()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Counts a head the connection refused before it became a request
    /// (the HTTP/1 parser's 431; its 400s are no outcome), as `handle`
    /// counts a refusal of its own made before any route was chosen: the
    /// client gets the same answer. It took no time the gateway measured.
    /// Each gets its request line too (no method: the head was not read
    /// whole), so the log and the metric count the same requests.
    pub fn refused(&self, error: &GatewayError, client: &ClientInfo) {
        let outcome = error.outcome();
        if let Some(outcome) = outcome {
            self.unrouted
                .finished(&self.metrics, outcome, Duration::ZERO);
        }
        // Never sent anywhere, but it tells this line from its neighbours.
        let request_id = request_ids::ensure(&mut http::HeaderMap::new(), true);
        RequestLine {
            route: "-",
            upstream: "-",
            method: "-",
            client: client.addr,
            status: error.status().as_u16(),
            outcome,
            key: None,
            latency: Duration::ZERO,
            home_region: None,
            request_id: request_id.as_ref(),
            client_left: false,
        }
        .write();
    }

    pub async fn handle(
        self: Arc<Self>,
        mut request: Request<ClientBody>,
        client: Arc<ClientInfo>,
    ) -> Response<Body> {
        let started = Instant::now();
        let method = request.method().clone();
        let version = request.version();
        // For the log line; `client` goes on with the request.
        let client_addr = client.addr;
        let runtime = self.runtime.load_full();
        // The client's head is held to the limits as it came: before the
        // gateway adds its own `X-Request-Id` (a head at `max_headers` fields
        // or `max_header_bytes` is the client's to send), and before region
        // headers without the valid token are removed.
        let over_limits = head_over_limits(&request, runtime.max_header_bytes, runtime.max_headers);
        // Before anything else reads the head: a client's region headers
        // without the valid token are gone.
        let region = runtime.regions.as_ref().map(|regions| crate::region::Hop {
            landed: crate::region::admit(regions, request.headers_mut()),
            regions: regions.clone(),
        });
        // A request another region forwarded was held to the limits where
        // it landed, and carries the fields that hop added
        // (crate::region::HOP_FIELDS).
        let refused = match over_limits {
            Some(error) if !region.as_ref().is_some_and(|hop| hop.landed) => Some(error),
            _ => check_framing(&request).err(),
        };
        // Kept for the log line only when it will be written: a copy of the
        // value costs an allocation and reference counting per request.
        let request_id = request_ids::ensure(
            request.headers_mut(),
            tracing::enabled!(tracing::Level::INFO),
        );
        let (bound, mut answer) = match refused {
            Some(error) => (None, Answer::error(error)),
            None => (self.dispatch(&runtime, request, client, region, started)).await,
        };
        if version != Version::HTTP_11 && carries_codings(&answer) {
            static LIMIT: LogLimit = LogLimit::new(REQUESTS_TOTAL);
            let route = bound.as_ref().map_or("-", |b| &*b.route.name);
            if let Some(left_out) = LIMIT.admit(route) {
                tracing::warn!(
                    route,
                    ?version,
                    not_logged = left_out.count(),
                    "the upstream's answer has a transfer coding besides chunked, which only an HTTP/1.1 client can be sent{left_out}"
                );
            }
            answer = Answer::error(GatewayError::UpstreamError);
        }
        let status = answer.response.status().as_u16();
        if let Some(outcome) = answer.outcome {
            let meters = bound.as_ref().map_or(&self.unrouted, |bound| &bound.meters);
            meters.finished(&self.metrics, outcome, started.elapsed());
        }
        let route = bound.as_ref().map(|bound| &bound.route);
        RequestLine {
            route: route.map_or("-", |r| &*r.name),
            upstream: route.map_or("-", |r| r.upstream.as_str()),
            method: method.as_str(),
            client: client_addr,
            status,
            outcome: answer.outcome,
            key: answer.key.as_deref(),
            latency: started.elapsed(),
            home_region: answer.home.as_deref().or_else(|| {
                (answer.key.as_ref()).and(runtime.regions.as_ref().map(|r| &**r.this()))
            }),
            request_id: request_id.as_ref(),
            client_left: false,
        }
        .write();
        answer.response
    }

    async fn dispatch(
        self: &Arc<Self>,
        runtime: &Runtime,
        mut request: Request<ClientBody>,
        client: Arc<ClientInfo>,
        region: Option<crate::region::Hop>,
        started: Instant,
    ) -> (Option<Arc<BoundRoute>>, Answer) {
        // Matched and forwarded as one path: an upstream never resolves
        // `..` into a route the gateway did not choose.
        match route::resolve_dot_segments(request.uri()) {
            None => {}
            Some(Ok(resolved)) => *request.uri_mut() = resolved,
            Some(Err(_)) => {
                let error = GatewayError::BadRequest("the request target cannot be resolved");
                return (None, Answer::error(error));
            }
        }
        let bound = runtime.route(request.method(), request.uri().path());
        if let Some(unreadable) = request.extensions().get::<UnreadableFields>() {
            return (
                bound.cloned(),
                refuse_unreadable(bound, &request, unreadable),
            );
        }
        let Some(bound) = bound else {
            return (None, Answer::error(GatewayError::NoRoute));
        };
        // Held until the request is answered (src/gateway/stream_head.rs).
        let Ok(_head) = stream_head::hold(&self.body_budget, &request) else {
            return (
                Some(bound.clone()),
                Answer::error(GatewayError::BodiesOverBudget),
            );
        };
        if let Some(verifier) = &bound.route.webhook {
            request = match signature::check(verifier, request, self.reading()).await {
                Ok(verified) => verified,
                Err(refused) => return (Some(bound.clone()), refused),
            };
        }
        let exchange = Exchange {
            bound: bound.clone(),
            client,
            max_stored_response: runtime.max_stored_response,
            region,
            started,
        };
        let answer = match &bound.route.policy {
            Some(policy) if policy.applies_to(request.method()) => {
                idempotent::run(self, exchange, policy, request).await
            }
            _ => {
                let mut answer = passthrough::run(self, &exchange, request).await;
                // A method the policy does not cover: no key, so no marker.
                if let Some(policy) = &bound.route.policy {
                    replay::unmark(answer.response.headers_mut(), policy.replay_header.name());
                }
                answer
            }
        };
        (Some(bound.clone()), answer)
    }
}

/// Whether the answer's body still carries a transfer coding besides
/// chunked (`gzip` of an upstream's `Transfer-Encoding: gzip, chunked`),
/// which the gateway does not decode. An HTTP/1.1 client is told it in the
/// `Transfer-Encoding` it gets; HTTP/1.0 has no transfer codings and HTTP/2
/// none but its framing, so those clients get a 502: the body, unlabelled,
/// would be taken for the representation itself.
fn carries_codings(answer: &Answer) -> bool {
    answer
        .response
        .extensions()
        .get::<TransferCodings>()
        .is_some()
}

/// A request whose head had field values with control characters, left
/// out of its map: never forwarded. When the left-out field is the route's
/// key, the answer is the `invalid-key` problem docs/behaviour.md names for a key with
/// control characters; otherwise a plain 400.
fn refuse_unreadable<B>(
    bound: Option<&Arc<BoundRoute>>,
    request: &Request<B>,
    unreadable: &UnreadableFields,
) -> Answer {
    let key_unreadable = bound
        .and_then(|bound| bound.route.policy.as_ref())
        .filter(|policy| policy.applies_to(request.method()))
        .is_some_and(|policy| {
            policy.key.iter().any(
                |source| matches!(source, KeySource::Header(name) if unreadable.0.contains(name)),
            )
        });
    Answer::error(if key_unreadable {
        GatewayError::InvalidKey("it holds control characters")
    } else {
        CONTROL_CHARACTERS
    })
}

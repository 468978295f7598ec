//! Every answer the gateway makes up itself, in one place: status, stable
//! `code`, RFC 9457 problem body, `Retry-After`, and the metric outcome.
//!
//! The problem `type` is a relative URI reference equal to the `code`
//! (e.g. `"type": "key-in-flight"`), so clients can match either member;
//! with `[server] problem_base` it is that base + the code, and the answer
//! links it (`Link: <...>; rel="describedby"`).

pub mod problem_base;
pub mod whereabouts;

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

use crate::body::{self, Body};
use crate::metrics::Outcome;
use crate::store::Refusal;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// A request body that ended before its framing said (the client stopped
/// sending, or left): 400, wherever it is found.
pub const INCOMPLETE_BODY: GatewayError =
    GatewayError::BadRequest("the request body could not be read completely");

/// A header field value with control characters (RFC 9110 §5.5), in a field
/// that is not the route's key: the request is not forwarded.
pub const CONTROL_CHARACTERS: GatewayError =
    GatewayError::BadRequest("a header field value holds control characters");

/// A `Host` (or target authority) that is not `uri-host [ ":" port ]`:
/// 400 (RFC 9112 §3.2), nothing forwarded.
pub const INVALID_HOST: GatewayError = GatewayError::BadRequest(
    "the request's host is not a host name or address with an optional port",
);

/// A request target with a byte over 0x7E (raw UTF-8, obs-text): a URI is
/// ASCII (RFC 3986), and the routes and the upstream would read such bytes
/// each their own way. 400 on HTTP/1 and HTTP/2 alike, nothing forwarded.
pub const NON_ASCII_TARGET: GatewayError =
    GatewayError::BadRequest("the request target has bytes that are not ASCII");

/// An HTTP/2 `host` field naming another host than `:authority`: 400
/// (RFC 9113 §8.3.1), nothing forwarded.
pub const HOST_NOT_AUTHORITY: GatewayError =
    GatewayError::BadRequest("the host field names another host than :authority");

/// HTTP/2 `host` fields, without `:authority`, naming two hosts: 400
/// (RFC 9113 §8.3.1, as HTTP/1.1 refuses a second `Host`), nothing forwarded.
pub const HOSTS_DISAGREE: GatewayError =
    GatewayError::BadRequest("the host fields name different hosts");

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    MissingKey,
    InvalidKey(&'static str),
    FingerprintMismatch,
    KeyInFlight {
        retry_after: Duration,
    },
    BodyTooLarge {
        limit: u64,
    },
    HeaderTooLarge {
        limit: u64,
    },
    /// More header fields than `max_headers` (431 `header-too-large` too).
    TooManyHeaders {
        limit: usize,
    },
    /// A request whose framing is ambiguous or invalid (smuggling attempts).
    BadRequest(&'static str),
    /// A body the gateway reads whole (a keyed request's, or a
    /// pass-through's small one) stopped coming, or did not all come in time.
    RequestTimeout(body::SlowBody),
    NoRoute,
    /// Nothing was sent: connection refused or connect timeout.
    UpstreamUnreachable,
    /// Nothing was sent: the shutdown's grace ended while the request still
    /// waited for a connection (502 `upstream-unreachable` too).
    NotSentShutdown,
    /// Pass-through: the upstream did not answer in time.
    UpstreamTimeout,
    /// Pass-through: the connection broke after the request was sent.
    UpstreamError,
    /// Keyed request: the request was sent and no answer came back in time.
    OutcomeUnknownTimeout,
    /// Keyed request: the connection broke after the request was sent.
    OutcomeUnknownBroken,
    /// Keyed request: the request was sent and the shutdown's grace ended
    /// before its answer came (the gateway stopped waiting).
    OutcomeUnknownShutdown,
    /// Keyed request: the outcome is unknown and that could not be recorded
    /// either (the store failed, or the lease was taken over), so a retry is
    /// not bound to this answer. `status` is the 504 or 502 it would have had.
    OutcomeUnrecorded {
        status: StatusCode,
    },
    /// The store failed; `refusal` when it answered and refused.
    StoreUnavailable {
        retry_after: Duration,
        refusal: Option<Refusal>,
    },
    /// The key's stored answer opens under none of the configured encryption
    /// keys: the request may have run, so nothing is forwarded either.
    StoredAnswerSealed,
    /// The key's stored record holds what the store never writes (a damaged
    /// disk, a restore gone wrong): the request may have run, so nothing is
    /// forwarded either.
    StoredAnswerDamaged,
    /// The route's `max_in_flight` executions are running; the key was freed.
    RouteOverloaded {
        retry_after: Duration,
    },
    /// The bodies held in memory at once (request bodies read whole, answers
    /// not yet taken by their clients) would pass `server.max_buffered_bodies`,
    /// or already do; nothing was reserved or forwarded.
    BodiesOverBudget,
    Unauthorized,
    Forbidden,
    NotFound,
    /// `/admin/keys/{route}…` found nothing, on a route name the running
    /// config lacks: most likely misspelt, and said so (404 `not-found`).
    NoSuchRoute,
    /// `/admin/keys/{route}/{key}` found nothing under a key that reads as a
    /// quoted string (`"k1"`): keys are named as stored, and a key a client
    /// sent quoted is stored without its quotes (404 `not-found`).
    NoQuotedKey,
    /// An admin-plane path that exists, asked with a method it does not
    /// answer; `allow` is the `Allow` header's value.
    MethodNotAllowed {
        allow: &'static str,
    },
    /// `/admin/*` while no admin token is configured (the log says why).
    /// The admin plane's 404 `not-found`, as for a path that does not
    /// exist; only its detail tells an operator why.
    AdminDisabled,
    /// `GET`/`DELETE /admin/keys/{route}/{key}` with `[region]`: no record
    /// of the key in this region's store, and where its records are kept
    /// (404 `not-found`, with `home_region` when that is known). Boxed:
    /// every result of a request carries this type.
    KeyNotHere(Box<whereabouts::Whereabouts>),
    /// A webhook route's signature check failed: nothing was forwarded or stored.
    InvalidSignature(crate::webhook::InvalidSignature),
    /// The key's home is another region, and the hop to its gateway failed
    /// (not reached, or its answer not received whole): nothing ran here.
    /// The home region holds the key's record, so a retry is safe.
    HomeRegionUnavailable {
        retry_after: Duration,
    },
    /// The key's home is another region, but the request already passed
    /// through this gateway on its way here: the regions' gateways disagree
    /// about its home and do not take each other's forwards. Not forwarded
    /// again; nothing ran in any region. The same code as an unreachable
    /// home (a client retries either alike), its own detail.
    RegionLoop {
        retry_after: Duration,
    },
    /// An admin-plane query parameter that is not understood (listing:
    /// `state`, `limit`, `after`); says which and why.
    InvalidQuery(&'static str),
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip)]
    link: Option<HeaderValue>,
    title: &'a str,
    status: u16,
    detail: String,
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    home_region: Option<&'a str>,
}

impl GatewayError {
    pub fn status(&self) -> StatusCode {
        use GatewayError::*;
        match self {
            MissingKey | InvalidKey(_) | BadRequest(_) => StatusCode::BAD_REQUEST,
            RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            FingerprintMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            KeyInFlight { .. } => StatusCode::CONFLICT,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HeaderTooLarge { .. } | TooManyHeaders { .. } => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            NoRoute | NotFound | NoSuchRoute | NoQuotedKey => StatusCode::NOT_FOUND,
            UpstreamUnreachable | NotSentShutdown | UpstreamError | OutcomeUnknownBroken => {
                StatusCode::BAD_GATEWAY
            }
            UpstreamTimeout | OutcomeUnknownTimeout | OutcomeUnknownShutdown => {
                StatusCode::GATEWAY_TIMEOUT
            }
            OutcomeUnrecorded { status } => *status,
            StoreUnavailable { .. }
            | StoredAnswerSealed
            | StoredAnswerDamaged
            | RouteOverloaded { .. }
            | BodiesOverBudget
            | HomeRegionUnavailable { .. }
            | RegionLoop { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden => StatusCode::FORBIDDEN,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            AdminDisabled | KeyNotHere(_) => StatusCode::NOT_FOUND,
            InvalidSignature(_) => StatusCode::UNAUTHORIZED,
            InvalidQuery(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The stable `code` member clients branch on.
    pub fn code(&self) -> &'static str {
        use GatewayError::*;
        match self {
            MissingKey => "missing-key",
            InvalidKey(_) => "invalid-key",
            FingerprintMismatch => "fingerprint-mismatch",
            KeyInFlight { .. } => "key-in-flight",
            BodyTooLarge { .. } => "body-too-large",
            HeaderTooLarge { .. } | TooManyHeaders { .. } => "header-too-large",
            BadRequest(_) => "bad-request",
            RequestTimeout(_) => "request-timeout",
            NoRoute => "no-route",
            UpstreamUnreachable | NotSentShutdown => "upstream-unreachable",
            UpstreamTimeout => "upstream-timeout",
            UpstreamError => "upstream-error",
            OutcomeUnknownTimeout
            | OutcomeUnknownBroken
            | OutcomeUnknownShutdown
            | OutcomeUnrecorded { .. } => "outcome-unknown",
            StoreUnavailable { .. } | StoredAnswerSealed | StoredAnswerDamaged => {
                "store-unavailable"
            }
            RouteOverloaded { .. } => "route-overloaded",
            BodiesOverBudget => "gateway-overloaded",
            Unauthorized => "unauthorized",
            Forbidden => "forbidden",
            NotFound | NoSuchRoute | NoQuotedKey => "not-found",
            MethodNotAllowed { .. } => "method-not-allowed",
            AdminDisabled | KeyNotHere(_) => "not-found",
            InvalidSignature(_) => "invalid-signature",
            HomeRegionUnavailable { .. } | RegionLoop { .. } => "home-region-unavailable",
            InvalidQuery(_) => "invalid-query",
        }
    }

    fn title(&self) -> &'static str {
        use GatewayError::*;
        match self {
            MissingKey => "Idempotency key required",
            InvalidKey(_) => "Invalid idempotency key",
            FingerprintMismatch => "Idempotency key reused with a different request",
            KeyInFlight { .. } => "A request with this idempotency key is in progress",
            BodyTooLarge { .. } => "Request body too large",
            HeaderTooLarge { .. } | TooManyHeaders { .. } => "Request header fields too large",
            BadRequest(_) => "Bad request",
            RequestTimeout(_) => "Request body too slow",
            NoRoute => "No route",
            UpstreamUnreachable | NotSentShutdown => "Upstream unreachable",
            UpstreamTimeout => "Upstream timed out",
            UpstreamError => "Upstream connection failed",
            OutcomeUnknownTimeout
            | OutcomeUnknownBroken
            | OutcomeUnknownShutdown
            | OutcomeUnrecorded { .. } => "Outcome unknown",
            StoreUnavailable { .. } | StoredAnswerSealed | StoredAnswerDamaged => {
                "Idempotency store unavailable"
            }
            RouteOverloaded { .. } => "Too many requests in progress on this route",
            BodiesOverBudget => "Too many bodies in progress",
            Unauthorized => "Unauthorized",
            Forbidden => "Forbidden",
            NotFound | NoSuchRoute | NoQuotedKey => "Not found",
            MethodNotAllowed { .. } => "Method not allowed",
            AdminDisabled | KeyNotHere(_) => "Not found",
            InvalidSignature(_) => "Invalid webhook signature",
            HomeRegionUnavailable { .. } | RegionLoop { .. } => "Home region unavailable",
            InvalidQuery(_) => "Invalid query parameter",
        }
    }

    fn detail(&self) -> String {
        use GatewayError::*;
        match self {
            MissingKey => "This route requires an idempotency key.".into(),
            InvalidKey(why) => format!("The idempotency key is invalid: {why}."),
            FingerprintMismatch => {
                "This idempotency key was used with a different request; use a new key.".into()
            }
            KeyInFlight { .. } => "Retry after the first request has completed.".into(),
            BodyTooLarge { limit } => {
                // Also said to key-less requests on a `json_pointer` route,
                // whose bodies are all read whole to look for the key, and to
                // every request on a webhook route, whose signature covers it.
                format!(
                    "The request body is over the {limit} bytes this route reads whole \
                     (max_request_body): a keyed request's, any on a route that finds \
                     its key in the body, and any on a webhook route (its signature \
                     covers the body)."
                )
            }
            HeaderTooLarge { limit } => format!("The request head exceeds {limit} bytes."),
            TooManyHeaders { limit } => {
                format!("The request carries more than {limit} header fields.")
            }
            BadRequest(why) => format!("{why}."),
            RequestTimeout(body::SlowBody::Stalled(idle)) => format!(
                "The request body stopped arriving for {} s; nothing was forwarded.",
                idle.as_secs_f64()
            ),
            RequestTimeout(body::SlowBody::Unfinished(whole)) => format!(
                "The request body did not arrive whole within {} s; nothing was forwarded.",
                whole.as_secs_f64()
            ),
            NoRoute => "No route matches this request.".into(),
            UpstreamUnreachable => "The upstream could not be reached; nothing was sent.".into(),
            NotSentShutdown => "The gateway shut down before this request was sent to the \
                 upstream; nothing was sent and the key is free. Retry."
                .into(),
            UpstreamTimeout => "The upstream did not answer in time.".into(),
            UpstreamError => "The connection to the upstream failed after the request was sent.".into(),
            OutcomeUnknownTimeout => "The request was sent but the upstream did not answer in time; \
                 it may have been executed. Retries get this answer until an operator purges the key."
                .into(),
            OutcomeUnknownBroken => "The request was sent but the connection broke before an answer; \
                 it may have been executed. Retries get this answer until an operator purges the key."
                .into(),
            OutcomeUnknownShutdown => "The request was sent but the gateway shut down before the \
                 upstream answered; it may have been executed. Retries get this answer until an \
                 operator purges the key."
                .into(),
            OutcomeUnrecorded { .. } => "The request was sent and its outcome is unknown; it may \
                 have been executed. This answer could not be recorded: a retry may get the answer \
                 of another attempt, or run the request again."
                .into(),
            // Said on the data plane and the admin plane alike.
            StoreUnavailable { refusal, .. } => format!(
                "{}; nothing was forwarded or changed. Retry later.",
                store_refusal(*refusal)
            ),
            StoredAnswerDamaged => "This key's stored answer is damaged in the idempotency store \
                 and cannot be replayed; the request may have run, so nothing was forwarded. An \
                 operator can reconcile it with the upstream and purge the key."
                .into(),
            StoredAnswerSealed => "This key's stored answer cannot be opened with the configured \
                 encryption keys; the request may have run, so nothing was forwarded. An operator \
                 can restore the key that sealed it, or purge the key."
                .into(),
            RouteOverloaded { .. } => "The route's limit of requests in progress is reached; \
                 nothing was forwarded and the key is free. Retry later."
                .into(),
            BodiesOverBudget => "The gateway holds as many bodies in memory as it may \
                 (server.max_buffered_bodies): request bodies, heads of HTTP/2 requests in \
                 progress, and answers their clients have not yet taken; nothing was reserved or forwarded. Retry later."
                .into(),
            Unauthorized => "A bearer token is required.".into(),
            Forbidden => "The bearer token is not valid.".into(),
            NotFound => "Nothing here.".into(),
            NoSuchRoute => "Nothing here: the running configuration has no route of this name. \
                A route renamed or removed keeps its records under its old name until they \
                expire, and they are listed, shown and purged by it."
                .into(),
            NoQuotedKey => "Nothing here: no record of this key as written. Keys are named as \
                stored, as the listing shows them: a key a client sent quoted \
                (Idempotency-Key: \"k1\") is stored without its quotes (k1)."
                .into(),
            MethodNotAllowed { allow } => format!("This resource answers {allow} only."),
            AdminDisabled => "The operator API is disabled: no admin token is configured. \
                 The gateway's log says why; set the token and restart it."
                .into(),
            InvalidSignature(invalid) => format!(
                "The {} webhook signature was refused: {}; nothing was forwarded.",
                invalid.scheme.as_str(),
                invalid.rejection
            ),
            HomeRegionUnavailable { .. } => "This idempotency key belongs to another region, \
                 whose gateway could not be reached or did not answer; nothing ran here. \
                 Retry later: the key runs in that region only, which keeps its record, \
                 so a retry cannot run it twice."
                .into(),
            RegionLoop { .. } => "This idempotency key belongs to another region, \
                 but the request had already been forwarded from this region's gateway \
                 and came back: the regions' gateways disagree about where it belongs. \
                 It was not forwarded again, and nothing ran in any region. \
                 Retry later, once the operators have made the regions agree."
                .into(),
            InvalidQuery(why) => format!("{why}."),
            KeyNotHere(whereabouts) => key_not_here(whereabouts),
        }
    }

    /// The region whose store keeps the key's records, when known.
    fn home_region(&self) -> Option<&str> {
        match self {
            GatewayError::KeyNotHere(whereabouts) => match &whereabouts.home {
                whereabouts::KeyHome::Region(home) => Some(home),
                _ => None,
            },
            _ => None,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            GatewayError::KeyInFlight { retry_after }
            | GatewayError::StoreUnavailable { retry_after, .. }
            | GatewayError::RouteOverloaded { retry_after }
            | GatewayError::HomeRegionUnavailable { retry_after }
            | GatewayError::RegionLoop { retry_after } => Some(*retry_after),
            GatewayError::StoredAnswerSealed
            | GatewayError::StoredAnswerDamaged
            | GatewayError::BodiesOverBudget => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The `idemgate_requests_total` outcome this answer counts as; `None` for
    /// answers outside the route outcomes (no route, bad framing, admin plane).
    pub fn outcome(&self) -> Option<Outcome> {
        use GatewayError::*;
        Some(match self {
            MissingKey => Outcome::MissingKey,
            InvalidKey(_) => Outcome::InvalidKey,
            FingerprintMismatch => Outcome::Mismatch,
            KeyInFlight { .. } => Outcome::Conflict,
            BodyTooLarge { .. } | HeaderTooLarge { .. } | TooManyHeaders { .. } => {
                Outcome::TooLarge
            }
            StoreUnavailable { .. } | StoredAnswerSealed | StoredAnswerDamaged => {
                Outcome::StoreUnavailable
            }
            RouteOverloaded { .. } | BodiesOverBudget => Outcome::Overloaded,
            OutcomeUnknownTimeout
            | OutcomeUnknownBroken
            | OutcomeUnknownShutdown
            | OutcomeUnrecorded { .. } => Outcome::OutcomeUnknown,
            UpstreamUnreachable | NotSentShutdown | UpstreamTimeout | UpstreamError => {
                Outcome::UpstreamError
            }
            InvalidSignature(_) => Outcome::InvalidSignature,
            HomeRegionUnavailable { .. } | RegionLoop { .. } => Outcome::RegionUnavailable,
            BadRequest(_)
            | RequestTimeout(_)
            | NoRoute
            | Unauthorized
            | Forbidden
            | NotFound
            | NoSuchRoute
            | NoQuotedKey
            | MethodNotAllowed { .. }
            | AdminDisabled
            | KeyNotHere(_)
            | InvalidQuery(_) => {
                return None;
            }
        })
    }

    /// The problem+json body bytes.
    pub fn body(&self) -> Vec<u8> {
        self.body_and_link().0
    }

    /// The body, and the `Link` to the problem's documentation when there is one.
    pub fn body_and_link(&self) -> (Vec<u8>, Option<HeaderValue>) {
        let code = self.code();
        let (kind, link) = problem_base::problem_type(code);
        let problem = Problem {
            kind: &kind,
            link,
            title: self.title(),
            status: self.status().as_u16(),
            detail: self.detail(),
            code,
            home_region: self.home_region(),
        };
        // Serializing a struct of strings and integers cannot fail.
        (
            serde_json::to_vec(&problem).unwrap_or_default(),
            problem.link,
        )
    }

    pub fn to_response(&self) -> Response<Body> {
        let (body, link) = self.body_and_link();
        let mut response = Response::new(body::full(body));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(link) = link {
            headers.insert(header::LINK, link);
        }
        if let Some(after) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, retry_after_value(after));
        }
        if *self == INCOMPLETE_BODY {
            // The body's framing broke: the connection closes after this
            // answer, and says so (HTTP/2 drops the field).
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if matches!(self, GatewayError::Unauthorized) {
            // RFC 9110 §15.5.2: a 401 names the scheme it wants.
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let GatewayError::MethodNotAllowed { allow } = self {
            // RFC 9110 §15.5.6: a 405 lists the methods the resource answers.
            headers.insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let GatewayError::InvalidSignature(invalid) = self {
            headers.insert(header::WWW_AUTHENTICATE, webhook_challenge(invalid.scheme));
        }
        response
    }
}

/// What the store did: a store that answered and refused is not said to be
/// unreachable, which would send its operator to look at the network.
fn store_refusal(refusal: Option<Refusal>) -> std::borrow::Cow<'static, str> {
    let said = match refusal {
        None => "The idempotency store cannot be reached",
        Some(Refusal::DiskFull) => {
            "The idempotency store is out of disk space and takes no new records"
        }
        Some(Refusal::NoRoomForConnections) => {
            "The idempotency store has no room for another connection"
        }
        Some(Refusal::ReadOnly) => {
            "The idempotency store takes no writes (a standby, or a read-only database)"
        }
        Some(Refusal::NotPermitted) => {
            "The idempotency store refuses the gateway's database role a privilege it needs"
        }
        Some(Refusal::PoolBusy { waited }) => {
            return format!(
                "Every connection of the gateway's pool to the idempotency store stayed busy \
                 for {} s with other requests",
                waited.as_secs_f64()
            )
            .into();
        }
    };
    said.into()
}

/// Where to ask for a key this region holds no record of.
fn key_not_here(whereabouts: &whereabouts::Whereabouts) -> String {
    use whereabouts::KeyHome;
    let this = &whereabouts.this;
    match &whereabouts.home {
        KeyHome::Region(home) if home == this => {
            format!("No record of this key: its home is this region, region {this}.")
        }
        KeyHome::Region(home) => format!(
            "No record of this key in region {this}: its home is region {home}, \
             whose store keeps its records. Ask that region's gateway."
        ),
        KeyHome::PerScope => format!(
            "No record of this key in region {this}. The route's scope reads each request, \
             so each scope of the key has a home region of its own, which the key alone \
             does not tell: ask each region (a request's log line names its home_region)."
        ),
        KeyHome::UnknownRoute => format!(
            "No record of this key in region {this}. The configuration has no route of \
             this name, so the key's home region is not known: ask each region."
        ),
    }
}

/// A webhook route's 401 names the scheme its sender must sign with.
fn webhook_challenge(scheme: crate::config::WebhookScheme) -> HeaderValue {
    use crate::config::WebhookScheme::*;
    HeaderValue::from_static(match scheme {
        Standard => "Webhook scheme=\"standard\"",
        Stripe => "Webhook scheme=\"stripe\"",
        Github => "Webhook scheme=\"github\"",
        Shopify => "Webhook scheme=\"shopify\"",
    })
}

/// `Retry-After` as whole seconds, rounded up, at least 1.
pub fn retry_after_value(after: Duration) -> HeaderValue {
    let mut secs = after.as_secs();
    if after.subsec_nanos() > 0 {
        secs += 1;
    }
    HeaderValue::from(secs.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_pinned_status_and_code() {
        let second = Duration::from_secs(1);
        let cases = [
            (GatewayError::MissingKey, 400, "missing-key"),
            (GatewayError::InvalidKey("empty"), 400, "invalid-key"),
            (
                GatewayError::FingerprintMismatch,
                422,
                "fingerprint-mismatch",
            ),
            (
                GatewayError::KeyInFlight {
                    retry_after: second,
                },
                409,
                "key-in-flight",
            ),
            (
                GatewayError::BodyTooLarge { limit: 1 },
                413,
                "body-too-large",
            ),
            (
                GatewayError::HeaderTooLarge { limit: 1 },
                431,
                "header-too-large",
            ),
            (GatewayError::BadRequest("x"), 400, "bad-request"),
            (
                GatewayError::RequestTimeout(body::SlowBody::Stalled(second)),
                408,
                "request-timeout",
            ),
            (GatewayError::NoRoute, 404, "no-route"),
            (
                GatewayError::UpstreamUnreachable,
                502,
                "upstream-unreachable",
            ),
            (GatewayError::NotSentShutdown, 502, "upstream-unreachable"),
            (GatewayError::UpstreamTimeout, 504, "upstream-timeout"),
            (GatewayError::UpstreamError, 502, "upstream-error"),
            (GatewayError::OutcomeUnknownTimeout, 504, "outcome-unknown"),
            (GatewayError::OutcomeUnknownBroken, 502, "outcome-unknown"),
            (GatewayError::OutcomeUnknownShutdown, 504, "outcome-unknown"),
            (
                GatewayError::OutcomeUnrecorded {
                    status: StatusCode::GATEWAY_TIMEOUT,
                },
                504,
                "outcome-unknown",
            ),
            (GatewayError::InvalidQuery("x"), 400, "invalid-query"),
            (
                GatewayError::StoreUnavailable {
                    retry_after: second,
                    refusal: None,
                },
                503,
                "store-unavailable",
            ),
            (GatewayError::StoredAnswerSealed, 503, "store-unavailable"),
            (GatewayError::StoredAnswerDamaged, 503, "store-unavailable"),
            (
                GatewayError::RouteOverloaded {
                    retry_after: second,
                },
                503,
                "route-overloaded",
            ),
            (GatewayError::BodiesOverBudget, 503, "gateway-overloaded"),
            (GatewayError::Unauthorized, 401, "unauthorized"),
            (GatewayError::Forbidden, 403, "forbidden"),
            (GatewayError::NotFound, 404, "not-found"),
            (GatewayError::NoSuchRoute, 404, "not-found"),
            (GatewayError::NoQuotedKey, 404, "not-found"),
            (
                GatewayError::MethodNotAllowed { allow: "GET, HEAD" },
                405,
                "method-not-allowed",
            ),
            (GatewayError::AdminDisabled, 404, "not-found"),
            (
                GatewayError::KeyNotHere(Box::new(whereabouts::Whereabouts {
                    this: "eu".into(),
                    home: whereabouts::KeyHome::PerScope,
                })),
                404,
                "not-found",
            ),
            (
                GatewayError::InvalidSignature(crate::webhook::InvalidSignature {
                    scheme: crate::config::WebhookScheme::Stripe,
                    rejection: crate::webhook::Rejection::NoMatch,
                }),
                401,
                "invalid-signature",
            ),
            (
                GatewayError::HomeRegionUnavailable {
                    retry_after: second,
                },
                503,
                "home-region-unavailable",
            ),
            (
                GatewayError::RegionLoop {
                    retry_after: second,
                },
                503,
                "home-region-unavailable",
            ),
        ];
        for (error, status, code) in cases {
            let response = error.to_response();
            assert_eq!(response.status().as_u16(), status, "{error:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
            let body: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
            assert_eq!(body["code"], code);
            assert_eq!(body["type"], code);
            assert_eq!(body["status"], status);
            assert!(body["title"].is_string() && body["detail"].is_string());
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one() {
        assert_eq!(retry_after_value(Duration::ZERO), "1");
        assert_eq!(retry_after_value(Duration::from_millis(200)), "1");
        assert_eq!(retry_after_value(Duration::from_millis(1500)), "2");
        assert_eq!(retry_after_value(Duration::from_secs(3)), "3");
        let response = GatewayError::KeyInFlight {
            retry_after: Duration::from_secs(2),
        }
        .to_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn invalid_signature_names_the_scheme_and_counts_apart() {
        for scheme in crate::config::WebhookScheme::ALL {
            let error = GatewayError::InvalidSignature(crate::webhook::InvalidSignature {
                scheme,
                rejection: crate::webhook::Rejection::TooOld,
            });
            let response = error.to_response();
            assert_eq!(
                response.headers()[header::WWW_AUTHENTICATE],
                format!("Webhook scheme=\"{}\"", scheme.as_str()).as_str()
            );
            assert_eq!(error.outcome(), Some(Outcome::InvalidSignature));
        }
    }

    /// A store that answered and refused is not said to be unreachable;
    /// the code, status and Retry-After stay those of a store outage.
    #[test]
    fn a_store_that_refused_is_told_apart_from_one_not_reached() {
        let unavailable = |refusal| GatewayError::StoreUnavailable {
            retry_after: Duration::from_secs(1),
            refusal,
        };
        let details = [
            (None, "cannot be reached"),
            (Some(Refusal::DiskFull), "out of disk space"),
            (
                Some(Refusal::NoRoomForConnections),
                "no room for another connection",
            ),
            (Some(Refusal::ReadOnly), "takes no writes"),
            (
                Some(Refusal::PoolBusy {
                    waited: Duration::from_millis(1500),
                }),
                "pool to the idempotency store stayed busy for 1.5 s",
            ),
            (
                Some(Refusal::NotPermitted),
                "refuses the gateway's database role",
            ),
        ];
        for (refusal, says) in details {
            let error = unavailable(refusal);
            let detail = error.detail();
            assert!(detail.contains(says), "{detail}");
            assert_eq!(detail.contains("cannot be reached"), refusal.is_none());
            assert!(detail.ends_with("nothing was forwarded or changed. Retry later."));
            let response = error.to_response();
            assert_eq!(response.status(), 503);
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
            assert_eq!(error.code(), "store-unavailable");
        }
    }

    #[test]
    fn method_not_allowed_carries_allow() {
        let response = GatewayError::MethodNotAllowed {
            allow: "GET, DELETE",
        }
        .to_response();
        assert_eq!(response.headers()[header::ALLOW], "GET, DELETE");
    }
}

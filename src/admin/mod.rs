//! The admin plane on `admin_listen`: probes and metrics (open), and the
//! operator API under `/admin/*` (bearer token).

mod auth;
pub mod listing;
pub mod records;
pub mod routes;

use std::sync::Arc;
use std::time::Duration;

use crate::body::ClientBody;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use tokio_util::sync::CancellationToken;

use crate::body::{self, Body};
use crate::client_info::ClientInfo;
use crate::error::{CONTROL_CHARACTERS, GatewayError, PROBLEM_JSON};
use crate::gateway::Gateway;
use crate::key::KeyError;
use crate::reload::{ReloadOutcome, Reloader};
use crate::wire::fields::UnreadableFields;
use records::RouteName;

/// `/readyz` gives up on a store that does not answer within this.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// What each admin resource answers; any other method gets 405 with this as
/// `Allow`. Under `/admin/*` the token is checked first: a caller without it
/// learns nothing about which paths exist.
const PROBE_METHODS: &str = "GET, HEAD";
const RELOAD_METHODS: &str = "POST";
const KEY_METHODS: &str = "GET, HEAD, DELETE";
const LIST_METHODS: &str = "GET, HEAD";

/// Why a query on `/admin/reload` or `/admin/routes` is refused: a script's
/// `?dry_run=1` or `?name=` would otherwise be answered as if heeded.
const NO_QUERY: &str = "this resource takes no query parameters";

/// Why a reload with a body is refused: a config posted as the body would
/// otherwise be answered "reloaded", the file on disk applied instead.
const RELOAD_BODY: GatewayError = GatewayError::BadRequest(
    "POST /admin/reload takes no body: it reads the configuration file the gateway was \
     started with; write the file, then POST with no body",
);

/// Why a query on `/admin/keys/{route}/{key}` is refused.
const KEY_QUERY: &str = "a key's path takes no query: a `?` in a key is written %3F \
     (and `#` %23, `%` %25)";

/// A HEAD answer says the `Content-Length` its GET would have (RFC 9110
/// §9.3.2 allows it, and probes read it): the server writes a HEAD answer's
/// length only as the handler gives it, since a proxied one is the upstream's
/// to say. The body, built as for GET, is dropped by the server.
fn head_length(response: &mut Response<Body>) {
    if response.headers().contains_key(header::CONTENT_LENGTH) {
        return;
    }
    if let Some(length) = http_body::Body::size_hint(response.body()).exact() {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
}

/// How long a reload's chunked body has to show that it is empty.
const RELOAD_BODY_WAIT: Duration = Duration::from_secs(2);

/// Whether a reload came with a body. Known empty: no `Content-Length` or
/// 0, or an HTTP/2 request ended with its head. A chunked body of no bytes
/// (some clients send one with every POST) is read to its end; any byte,
/// or no end within [`RELOAD_BODY_WAIT`], is a body.
async fn reload_body_sent(mut body: ClientBody) -> bool {
    use http_body_util::BodyExt;
    if http_body::Body::is_end_stream(&body) {
        return false;
    }
    if let Some(length) = http_body::Body::size_hint(&body).exact() {
        return length > 0;
    }
    let read_to_end = async {
        while let Some(frame) = body.frame().await {
            match frame.map(http_body::Frame::into_data) {
                Ok(Ok(data)) if data.is_empty() => {}
                // Trailers carry no config; data or a broken body is a body.
                Ok(Err(_trailers)) => {}
                _ => return true,
            }
        }
        false
    };
    tokio::time::timeout(RELOAD_BODY_WAIT, read_to_end)
        .await
        .unwrap_or(true)
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    GatewayError::MethodNotAllowed { allow }.to_response()
}

/// What an operator request asks, as the operator API reads it.
struct Asked<'a> {
    method: &'a Method,
    path: &'a str,
    query: Option<&'a str>,
    /// A body came, or may still come, with the request.
    body_sent: bool,
}

pub struct AdminPlane {
    gateway: Arc<Gateway>,
    reloader: Arc<Reloader>,
    /// Cancelled at SIGTERM: the data plane drains while this plane still
    /// answers, `/readyz` with 503 so that a load balancer stops sending.
    draining: CancellationToken,
}

impl AdminPlane {
    pub fn new(
        gateway: Arc<Gateway>,
        reloader: Arc<Reloader>,
        draining: CancellationToken,
    ) -> Self {
        Self {
            gateway,
            reloader,
            draining,
        }
    }

    /// `client`: the connection it came over, named in the log line of a
    /// purge.
    pub async fn handle(
        &self,
        request: Request<ClientBody>,
        client: &ClientInfo,
    ) -> Response<Body> {
        let head = request.method() == Method::HEAD;
        let mut response = self.answer(request, client).await;
        if head {
            head_length(&mut response);
        }
        response
    }

    async fn answer(&self, request: Request<ClientBody>, client: &ClientInfo) -> Response<Body> {
        // Its head lacks the fields it sent with control characters: not
        // acted on as if they had not been sent.
        if request.extensions().get::<UnreadableFields>().is_some() {
            return CONTROL_CHARACTERS.to_response();
        }
        // The server's head limits, as the data plane holds its heads to
        // them: the connection's buffer takes up to twice the bytes.
        let over_limits = {
            let runtime = self.gateway.runtime();
            crate::gateway::head_over_limits(
                &request,
                runtime.max_header_bytes,
                runtime.max_headers,
            )
        };
        if let Some(error) = over_limits {
            return error.to_response();
        }
        let path = request.uri().path().to_string();
        // HEAD is answered as GET (RFC 9110 §9.3.2): some probes send it.
        let read = matches!(*request.method(), Method::GET | Method::HEAD);
        match path.as_str() {
            "/healthz" | "/readyz" | "/metrics" if !read => method_not_allowed(PROBE_METHODS),
            "/healthz" => match self.gateway.store().stopped_for_good() {
                // Only a restart mends it: a liveness probe makes one.
                Some(err) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("store: {err}\n")),
                None => text(StatusCode::OK, "ok\n"),
            },
            "/readyz" => self.ready().await,
            "/metrics" => {
                let metrics = self.gateway.metrics();
                let held = i64::try_from(self.gateway.buffered_body_bytes()).unwrap_or(i64::MAX);
                metrics.buffered_bodies.set(held);
                let mut response = Response::new(body::full(metrics.render()));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            p if p.starts_with("/admin/") => {
                let allowed = auth::check(
                    &self.gateway.runtime().config.admin.tokens,
                    request.headers(),
                );
                if let Err(error) = allowed {
                    auth::log_refusal(&error, client);
                    return error.to_response();
                }
                let (parts, body) = request.into_parts();
                // Only a reload looks at the body.
                let body_sent = parts.method == Method::POST
                    && path == "/admin/reload"
                    && reload_body_sent(body).await;
                let asked = Asked {
                    method: &parts.method,
                    path: &path,
                    query: parts.uri.query(),
                    body_sent,
                };
                self.operator(asked, client).await
            }
            _ => GatewayError::NotFound.to_response(),
        }
    }

    async fn ready(&self) -> Response<Body> {
        if self.draining.is_cancelled() {
            return text(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
        }
        match tokio::time::timeout(READY_TIMEOUT, self.gateway.store().ping()).await {
            Ok(Ok(())) => text(StatusCode::OK, "ready\n"),
            Ok(Err(err)) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("store: {err}\n")),
            Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "store: no answer\n"),
        }
    }

    async fn operator(&self, asked: Asked<'_>, client: &ClientInfo) -> Response<Body> {
        let Asked {
            method,
            path,
            query,
            body_sent,
        } = asked;
        if path == "/admin/reload" {
            return if method != Method::POST {
                method_not_allowed(RELOAD_METHODS)
            } else if query.is_some() {
                GatewayError::InvalidQuery(NO_QUERY).to_response()
            } else if body_sent {
                RELOAD_BODY.to_response()
            } else {
                self.reload().await
            };
        }
        let read = matches!(*method, Method::GET | Method::HEAD);
        if path == "/admin/routes" {
            if !read {
                return method_not_allowed(LIST_METHODS);
            }
            if query.is_some() {
                return GatewayError::InvalidQuery(NO_QUERY).to_response();
            }
            let config = self.gateway.runtime().config.clone();
            let document = routes::to_json(&config, &self.gateway.metrics().replay_ages);
            return json(StatusCode::OK, "application/json", &document);
        }
        if let Some(route) = listing::parse_list_path(path) {
            if !read {
                return method_not_allowed(LIST_METHODS);
            }
            let store = self.gateway.store();
            let result = match route {
                RouteName::Named(route) => {
                    let known = self.knows_route(&route);
                    match listing::parse_query(route, query) {
                        Ok(query) => listing::list(store.as_ref(), &query, known).await,
                        Err(error) => Err(error),
                    }
                }
                // The query is still read, as for any name.
                RouteName::Impossible => {
                    listing::parse_query(String::new(), query).and(Err(GatewayError::NoSuchRoute))
                }
            };
            return result.unwrap_or_else(|error| error.to_response());
        }
        let Some((route, key)) = records::parse_key_path(path) else {
            return GatewayError::NotFound.to_response();
        };
        if !matches!(*method, Method::GET | Method::HEAD | Method::DELETE) {
            return method_not_allowed(KEY_METHODS);
        }
        // A `?` ends the path, so `.../order?7` would name the key `order`:
        // another key's records, shown or purged. The resource takes no
        // query; one (even an empty `?`) is a key written unescaped.
        if query.is_some() {
            return GatewayError::InvalidQuery(KEY_QUERY).to_response();
        }
        // As stored, as the listing shows it: `"k1"` is never read as `k1`.
        let key = match crate::key::as_stored(&key) {
            Ok(key) => key.to_owned(),
            Err(KeyError::Invalid(why)) => return GatewayError::InvalidKey(why).to_response(),
            Err(KeyError::Missing) => return GatewayError::InvalidKey("empty").to_response(),
        };
        let RouteName::Named(route) = route else {
            return GatewayError::NoSuchRoute.to_response();
        };
        let store = self.gateway.store();
        let result = if *method == Method::DELETE {
            records::purge(store.as_ref(), &route, &key, client).await
        } else {
            records::show(store.as_ref(), &route, &key).await
        };
        // With regions this store is one region's: its 404 says where the
        // key's records are kept (docs/multi-region.md#operating-on-keys).
        let result = result.map_err(|error| match error {
            GatewayError::NotFound => {
                let config = &self.gateway.runtime().config;
                match crate::region::key_home_in(config, &route, &key) {
                    Some(whereabouts) => GatewayError::KeyNotHere(Box::new(whereabouts)),
                    None if !self.knows_route(&route) => GatewayError::NoSuchRoute,
                    None if crate::key::unquotes_in_a_header(&key) => GatewayError::NoQuotedKey,
                    None => GatewayError::NotFound,
                }
            }
            other => other,
        });
        result.unwrap_or_else(|error| error.to_response())
    }

    /// Whether the running config has a route named `route`.
    fn knows_route(&self, route: &str) -> bool {
        (self.gateway.runtime().config.routes.iter()).any(|known| known.name == route)
    }

    async fn reload(&self) -> Response<Body> {
        let outcome = tokio::select! {
            outcome = self.reloader.reload() => outcome,
            // A reload stuck in its read (a hung mount), or queued behind
            // one, would hold this connection, and so the process, open for
            // the whole grace; the process reads the file anew at its start.
            () = self.draining.cancelled() => {
                return reload_problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shutting-down",
                    "The gateway is shutting down",
                    "a reload is not awaited while the gateway stops; its next start reads \
                     the file anew",
                    None,
                );
            }
        };
        match outcome {
            ReloadOutcome::Applied { notes } => json(
                StatusCode::OK,
                "application/json",
                &serde_json::json!({ "status": "reloaded", "notes": notes }),
            ),
            ReloadOutcome::Rejected { errors } => reload_problem(
                StatusCode::BAD_REQUEST,
                "invalid-config",
                "The configuration file is invalid; the running configuration stays",
                &errors.join("\n"),
                Some(&errors),
            ),
            // The fault itself is in the log (the reloader logs it).
            ReloadOutcome::Failed { .. } => reload_problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reload-failed",
                "The reload stopped on a fault of the gateway",
                "the gateway's log says what failed; a later reload may be tried, and a \
                 restart reads the file anew",
                None,
            ),
        }
    }
}

/// A reload's problem (RFC 9457), its `type` and `Link` as `problem_base`
/// makes every problem's; a refused file's errors also as a list.
fn reload_problem(
    status: StatusCode,
    code: &'static str,
    title: &str,
    detail: &str,
    errors: Option<&[String]>,
) -> Response<Body> {
    let (kind, link) = crate::error::problem_base::problem_type(code);
    let mut document = serde_json::json!({
        "type": kind,
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    });
    if let Some(errors) = errors {
        document["errors"] = serde_json::json!(errors);
    }
    let mut response = json(status, PROBLEM_JSON, &document);
    if let Some(link) = link {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

fn text(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(body::full(text.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

pub(crate) fn json(
    status: StatusCode,
    content_type: &'static str,
    document: &serde_json::Value,
) -> Response<Body> {
    let mut response = Response::new(body::full(document.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

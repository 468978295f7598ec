//! Checks on a client's request head that come before its route: its size
//! (`max_header_bytes`, `max_headers`), and what a reverse proxy must not
//! pass on (`check_framing`, `check_host`).

use http::uri::Scheme;
use http::{Method, Request, Version, header};

use crate::error::{
    GatewayError, HOST_NOT_AUTHORITY, HOSTS_DISAGREE, INVALID_HOST, NON_ASCII_TARGET,
};
use crate::wire::host;

/// A head over `max_header_bytes` or `max_headers`. Counted here for
/// HTTP/2, and for HTTP/1 too: the server's parser admits a forwarding
/// hop's fields beyond `max_headers` (crate::region::HOP_FIELDS). The
/// admin plane holds its heads to the same limits.
pub(crate) fn head_over_limits<B>(
    request: &Request<B>,
    max_header_bytes: u64,
    max_headers: usize,
) -> Option<GatewayError> {
    let headers = request.headers();
    if headers.len() > max_headers {
        return Some(GatewayError::TooManyHeaders { limit: max_headers });
    }
    let target = request
        .uri()
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len());
    let head_bytes: usize = target
        + headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>();
    (head_bytes as u64 > max_header_bytes).then_some(GatewayError::HeaderTooLarge {
        limit: max_header_bytes,
    })
}

/// Refuses what a reverse proxy must not pass on: `Content-Length` values
/// that two parsers could read differently, `CONNECT` and its authority-form
/// target, a WebSocket handshake ([`asks_for_websocket`]), a method with lower-case letters, a target with bytes over 0x7E,
/// an HTTP/2 field value with a space or tab at either end, and a host that is not one ([`check_host`]).
pub(super) fn check_framing<B>(request: &Request<B>) -> Result<(), GatewayError> {
    let headers = request.headers();
    // Both Content-Length and Transfer-Encoding never get here: the HTTP/1
    // parser refuses such a request, and hyper refuses it on HTTP/2.
    // The HTTP/1 engines' own rule (src/wire/framing.rs), for HTTP/2.
    let mut length = crate::wire::framing::ContentLength::default();
    if headers.get_all(header::CONTENT_LENGTH).iter().any(|v| {
        length
            .note(v.as_bytes(), crate::wire::framing::Lists::Refused)
            .is_err()
    }) {
        return Err(GatewayError::BadRequest("invalid Content-Length"));
    }
    if request.method() == Method::CONNECT {
        return Err(GatewayError::BadRequest("CONNECT is not proxied"));
    }
    if asks_for_websocket(request) {
        return Err(GatewayError::BadRequest(
            "WebSocket is not proxied: the gateway does not pass on protocol upgrades; \
             connect to the WebSocket endpoint directly",
        ));
    }
    // The authority form (`host:port`, no path) is CONNECT's alone (RFC 9112
    // §3.2.3): with another method it names no resource, so no route.
    let uri = request.uri();
    if uri.scheme().is_none() && uri.authority().is_some() && uri.path_and_query().is_none() {
        return Err(GatewayError::BadRequest(
            "the request target host:port (authority form) is only for CONNECT",
        ));
    }
    // Methods are case-sensitive (RFC 9110 §9.1) and every registered one is
    // upper-case: `post` is no `POST` to a route's `methods`, yet upstreams
    // that upper-case methods (Django, Flask) run it as one, past a key the
    // route requires; `head` would be answered as HEAD while the gateway
    // waits for a body. nginx and Node refuse them too.
    if request
        .method()
        .as_str()
        .bytes()
        .any(|byte| byte.is_ascii_lowercase())
    {
        return Err(GatewayError::BadRequest(
            "the request method has lower-case letters; methods are case-sensitive (POST, not post)",
        ));
    }
    // The HTTP/1 parser refuses such bytes in the request line; the HTTP/2
    // layer lets UTF-8 through in `:path`, which would be routed, keyed and
    // sent to the upstream raw.
    if uri
        .path_and_query()
        .is_some_and(|target| !target.as_str().is_ascii())
    {
        return Err(NON_ASCII_TARGET);
    }
    // RFC 9113 §8.2.1: such a request is malformed. HTTP/1 trims this
    // whitespace as optional (the parser has); HTTP/2 has none to trim, and
    // an upstream, or a key, would read ` k1` and `k1` as two values.
    if request.version() == Version::HTTP_2
        && request.headers().values().any(|value| {
            let value = value.as_bytes();
            [value.first(), value.last()]
                .into_iter()
                .any(|edge| matches!(edge, Some(b' ' | b'\t')))
        })
    {
        return Err(GatewayError::BadRequest(
            "an HTTP/2 field value may not start or end with a space or tab",
        ));
    }
    check_host(request)
}

/// An HTTP/1.1 request whose `Upgrade` lists `websocket` (RFC 6455 §4.1).
/// `Upgrade` is hop-by-hop and not passed on, so the handshake would reach
/// the upstream as a plain GET, and its client would get that GET's
/// answer (a 200 page, or an upstream's 400 about a missing upgrade)
/// instead of a word that WebSocket is not proxied. Other upgrades (curl's
/// `h2c` on a first request over http) are ignored, as RFC 9110 §7.8 lets
/// a server do: the request is served as it is. HTTP/2 carries no
/// `Upgrade` (the HTTP/2 layer refuses the field), and its extended
/// CONNECT (RFC 8441) is never offered.
fn asks_for_websocket<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
        .any(|protocol| {
            // A protocol is `name[/version]` (RFC 9110 §7.8).
            let name = protocol.split(|&byte| byte == b'/').next().unwrap_or(b"");
            name.trim_ascii().eq_ignore_ascii_case(b"websocket")
        })
}

/// The host the upstream is told (`Host`, made from the target's authority
/// when there is one) must be one (RFC 9112 §3.2, RFC 9113 §8.3.1): the
/// HTTP/1 parser checks the `Host` field; the authority of an HTTP/1.1
/// absolute-form target (`http://user@evil/`), an HTTP/2 `:authority` and
/// an HTTP/2 `host` field (which must agree with `:authority`) are checked
/// here.
fn check_host<B>(request: &Request<B>) -> Result<(), GatewayError> {
    // An absolute-form target names an http(s) resource or none the
    // gateway serves (`ftp://evil/x` is not `http://evil/x`).
    if request
        .uri()
        .scheme()
        .is_some_and(|scheme| *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS)
    {
        return Err(GatewayError::BadRequest(
            "the request target's scheme is not http or https",
        ));
    }
    let authority_ok = request
        .uri()
        .authority()
        .is_none_or(|authority| host::is_valid(authority.as_str().as_bytes()));
    let fields_ok = request.version() != Version::HTTP_2
        || request
            .headers()
            .get_all(header::HOST)
            .iter()
            .all(|value| host::is_valid(value.as_bytes().trim_ascii()));
    // An HTTP/2 request names its host by `:authority` or `host` (RFC 9113
    // §8.3.1), as an HTTP/1.1 one must send `Host`: with neither, it would
    // go on under the upstream's host and scope.
    let named = request.version() != Version::HTTP_2
        || request.uri().authority().is_some()
        || request.headers().contains_key(header::HOST);
    if !(authority_ok && fields_ok && named) {
        return Err(INVALID_HOST);
    }
    if request.version() != Version::HTTP_2 {
        return Ok(());
    }
    // Over HTTP/2 a `host` field beside `:authority` must name the same
    // host (RFC 9113 §8.3.1): the gateway takes the host it sends on, and a
    // scope's `header:host`, from `:authority`, and a `host` that says
    // otherwise could steer a peer behind it that reads it. Without
    // `:authority`, `host` fields that name two hosts are no one host (as
    // HTTP/1.1 refuses a second `Host`): the gateway would go on under the
    // first while a proxy in front may have read the last.
    let mut hosts = request.headers().get_all(header::HOST).iter();
    let named = match request.uri().authority() {
        Some(authority) => Some(authority.as_str().as_bytes()),
        None => hosts.next().map(|first| first.as_bytes().trim_ascii()),
    };
    if let Some(named) = named
        && hosts.any(|value| !value.as_bytes().trim_ascii().eq_ignore_ascii_case(named))
    {
        return Err(if request.uri().authority().is_some() {
            HOST_NOT_AUTHORITY
        } else {
            HOSTS_DISAGREE
        });
    }
    Ok(())
}

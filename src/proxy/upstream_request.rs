//! The client's request head made the upstream's (`prepare_request`): the
//! target on the upstream, `Host`, `X-Forwarded-*`, cookies joined for an
//! HTTP/1 upstream, hop-by-hop fields dropped (`hop_by_hop.rs`).

use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderMap, Uri, Version};

use super::strip_hop_by_hop;
use super::upstream::Upstream;
use crate::client_info::ClientInfo;

// Names, not strings: a `&str` key is parsed and checked again on every use.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Turns the client's request head into the upstream's: target URI on the
/// upstream, hop-by-hop headers dropped, `X-Forwarded-*` set, `Host` kept (or
/// replaced by the upstream's authority when `preserve_host` is off).
pub fn prepare_request(
    parts: &mut Parts,
    upstream: &Upstream,
    client: &ClientInfo,
    preserve_host: bool,
) -> Result<(), http::Error> {
    // The target's authority, when there is one, wins over a `Host` field
    // that says otherwise: over HTTP/2 it is the `:authority`, from which an
    // intermediary must make `Host` (RFC 9113 §8.3.1), and an HTTP/1.1
    // absolute-form target overrides `Host` too (RFC 9112 §3.2.2). Otherwise
    // (an HTTP/1.1 origin-form target) `Host` is the client's host.
    let (host, in_field) = match parts.uri.authority() {
        Some(authority) => (HeaderValue::from_str(authority.as_str()).ok(), false),
        None => (parts.headers.get(header::HOST).cloned(), true),
    };
    strip_hop_by_hop(&mut parts.headers);
    set_forwarded(&mut parts.headers, client, host.as_ref());
    match (preserve_host, host, upstream.host_header()) {
        // Already the head's one `Host` field (the server refuses an HTTP/1
        // head with two): left as it is, not put back in its own place.
        // Unless `Connection` named it: the client's host is still the one
        // the upstream is sent, as `X-Forwarded-Host` says.
        (true, Some(_), _)
            if in_field
                && parts.version != Version::HTTP_2
                && parts.headers.contains_key(header::HOST) => {}
        (true, Some(host), _) => {
            parts.headers.insert(header::HOST, host);
        }
        (false, _, Some(host)) => {
            parts.headers.insert(header::HOST, host.clone());
        }
        _ => {}
    }
    if parts.version == Version::HTTP_2 && !upstream.http2() {
        join_cookies(&mut parts.headers);
    }
    parts.uri = upstream_uri(upstream, &parts.uri, &mut parts.headers)?;
    parts.version = if upstream.http2() {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    Ok(())
}

/// An HTTP/2 client may send each cookie as a `Cookie` field of its own
/// (browsers do, for header compression); an HTTP/1 upstream must get them
/// as one field joined by "; " (RFC 9113 §8.2.3), as many servers read only
/// the first line, or join lines with ", ", which is not a cookie separator.
fn join_cookies(headers: &mut HeaderMap) {
    let mut crumbs = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (crumbs.next(), crumbs.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for crumb in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(crumb.as_bytes());
    }
    // Made of valid field values and "; ", so always valid itself.
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, value);
    }
}

fn set_forwarded(headers: &mut HeaderMap, client: &ClientInfo, host: Option<&HeaderValue>) {
    // Every line the client sent is one list (RFC 9110 §5.3): each hop on
    // it is kept, in order, and the client's address goes last.
    let mut chain = String::new();
    for value in headers.get_all(&X_FORWARDED_FOR) {
        let Ok(value) = value.to_str() else { continue };
        let value = value.trim();
        if !value.is_empty() {
            chain.push_str(value);
            chain.push_str(", ");
        }
    }
    let forwarded_for = if chain.is_empty() {
        client.forwarded_for().cloned()
    } else {
        chain.push_str(&client.addr.ip().to_string());
        HeaderValue::try_from(chain).ok()
    };
    if let Some(value) = forwarded_for {
        headers.insert(X_FORWARDED_FOR, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(client.proto));
    match host {
        Some(host) => {
            headers.insert(X_FORWARDED_HOST, host.clone());
        }
        // No host named (HTTP/1.0 may leave `Host` out): a client's own
        // `X-Forwarded-Host` must not reach the upstream as if the gateway
        // had set it.
        None => {
            headers.remove(X_FORWARDED_HOST);
        }
    }
}

/// The client's path and query on the upstream. Without a base path the
/// parsed target is reused as it is (no copy, no second parse). HTTP/1 sends
/// only the path and query (the authority travels in `Host`), so only an
/// HTTP/2 upstream gets the absolute form its `:scheme` and `:authority`
/// come from: the `Host` chosen above moves into it, as a client should
/// send it (RFC 9113 §8.3.1), and never a `host` field that says otherwise.
fn upstream_uri(
    upstream: &Upstream,
    original: &Uri,
    headers: &mut HeaderMap,
) -> Result<Uri, http::Error> {
    let base = upstream.base_path();
    let original = original.path_and_query();
    // An absolute-form target with an empty path (`http://gw?x=1`) leaves
    // the query alone, which is no origin-form: its path is `/` (RFC 9110
    // §4.2.3).
    let no_path = original.is_some_and(|pq| pq.as_str().starts_with('?'));
    let path_and_query = match original {
        Some(pq) if base.is_empty() && !no_path => pq.clone(),
        None if base.is_empty() => PathAndQuery::from_static("/"),
        pq => {
            let slash = if no_path { "/" } else { "" };
            let pq = pq.map_or("/", |pq| pq.as_str());
            PathAndQuery::try_from(format!("{base}{slash}{pq}"))?
        }
    };
    if !upstream.http2() {
        return Ok(Uri::from(path_and_query));
    }
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(upstream.scheme().clone());
    parts.authority = Some(http2_authority(upstream, headers));
    parts.path_and_query = Some(path_and_query);
    Ok(Uri::from_parts(parts)?)
}

/// The `:authority` of a request to an HTTP/2 upstream: the `Host` field,
/// taken out of the headers. Only safe because that upstream's connection
/// is dialed by configuration, never by this authority
/// (http2/mod.rs); a client that dials by URI would go wherever the
/// client's `Host` said.
///
/// No `Host` (an HTTP/1.0 client may send none), or one the URI grammar
/// refuses though the gateway let it pass: the upstream's own authority,
/// and the field stays, so an upstream that reads `Host` still sees the
/// client's.
fn http2_authority(upstream: &Upstream, headers: &mut HeaderMap) -> Authority {
    let host = headers
        .get(header::HOST)
        .and_then(|host| Authority::try_from(host.as_bytes()).ok());
    match host {
        Some(authority) => {
            headers.remove(header::HOST);
            authority
        }
        None => upstream.authority().clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;
    use std::time::Duration;

    fn upstream(url: &str) -> Upstream {
        upstream_over(url, false)
    }

    fn upstream_over(url: &str, http2: bool) -> Upstream {
        Upstream::new(&UpstreamConfig {
            name: "api".into(),
            url: url.into(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            http2,
            keep_alive: true,
            max_connections: 4,
            tls: None,
        })
        .unwrap()
    }

    fn client() -> ClientInfo {
        ClientInfo::new("10.0.0.7:5555".parse().unwrap(), "http", None)
    }

    /// The head `request` becomes on its way to `upstream`.
    fn prepared(request: http::Request<()>, upstream: &Upstream, preserve_host: bool) -> Parts {
        let (mut parts, ()) = request.into_parts();
        prepare_request(&mut parts, upstream, &client(), preserve_host).unwrap();
        parts
    }

    #[tokio::test]
    async fn rewrites_target_and_sets_forwarded_headers() {
        let request = http::Request::builder()
            .method("POST")
            .uri("/v1/charges?a=1")
            .header("host", "api.example.com")
            .header("x-forwarded-for", "192.0.2.1")
            .header("connection", "keep-alive")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream("http://127.0.0.1:3000"), true);
        assert_eq!(parts.uri, "/v1/charges?a=1");
        assert_eq!(parts.headers["host"], "api.example.com");
        assert_eq!(parts.headers["x-forwarded-for"], "192.0.2.1, 10.0.0.7");
        assert_eq!(parts.headers["x-forwarded-proto"], "http");
        assert_eq!(parts.headers["x-forwarded-host"], "api.example.com");
        assert!(parts.headers.get("connection").is_none());
    }

    #[tokio::test]
    async fn every_forwarded_for_line_is_kept_in_order() {
        let request = http::Request::builder()
            .uri("/")
            .header("x-forwarded-for", "192.0.2.1")
            .header("x-forwarded-for", " ")
            .header("x-forwarded-for", "198.51.100.2, 203.0.113.3")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream("http://up"), true);
        let lines: Vec<_> = parts.headers.get_all("x-forwarded-for").iter().collect();
        assert_eq!(
            lines,
            ["192.0.2.1, 198.51.100.2, 203.0.113.3, 10.0.0.7"],
            "one line, every hop"
        );
    }

    #[tokio::test]
    async fn a_host_named_in_connection_is_still_sent_on() {
        for http2 in [false, true] {
            let request = http::Request::builder()
                .uri("/x")
                .header("host", "shop.example")
                .header("connection", "host")
                .body(())
                .unwrap();
            let parts = prepared(request, &upstream_over("http://up:81", http2), true);
            let host = match http2 {
                false => parts
                    .headers
                    .get("host")
                    .map(|h| h.to_str().unwrap().to_owned()),
                true => parts.uri.authority().map(|a| a.as_str().to_owned()),
            };
            assert_eq!(host.as_deref(), Some("shop.example"), "http2: {http2}");
        }
    }

    /// An HTTP/1.0 request without `Host` does not get its own
    /// `X-Forwarded-Host: evil` forwarded as if the gateway had set it.
    #[tokio::test]
    async fn a_clients_forwarded_host_never_passes_for_the_gateways() {
        let request = http::Request::builder()
            .version(Version::HTTP_10)
            .uri("/x")
            .header("x-forwarded-host", "evil.example")
            .header("x-forwarded-proto", "https")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream("http://up"), true);
        assert_eq!(parts.headers.get("x-forwarded-host"), None);
        assert_eq!(parts.headers["x-forwarded-proto"], "http");
    }

    #[tokio::test]
    async fn http2_cookie_fields_are_joined_for_an_http1_upstream() {
        let request = |version| {
            http::Request::builder()
                .version(version)
                .uri("https://api.example.com/x")
                .header("cookie", "a=1")
                .header("cookie", "b=2; c=3")
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        let cookies = |parts: &Parts| -> Vec<String> {
            parts
                .headers
                .get_all("cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        let mut parts = request(Version::HTTP_2);
        prepare_request(&mut parts, &upstream("http://up"), &client(), true).unwrap();
        assert_eq!(cookies(&parts), ["a=1; b=2; c=3"]);
        // An HTTP/2 upstream may take them as they came.
        let mut parts = request(Version::HTTP_2);
        prepare_request(
            &mut parts,
            &upstream_over("http://up", true),
            &client(),
            true,
        )
        .unwrap();
        assert_eq!(cookies(&parts), ["a=1", "b=2; c=3"]);
    }

    #[tokio::test]
    async fn an_http2_upstream_gets_the_absolute_form() {
        let parts = prepared(
            http::Request::get("/x?y=1").body(()).unwrap(),
            &upstream_over("http://127.0.0.1:3000/base", true),
            true,
        );
        assert_eq!(parts.uri, "http://127.0.0.1:3000/base/x?y=1");
        assert_eq!(parts.version, Version::HTTP_2);
    }

    /// An HTTP/2 upstream gets the client's host as `:authority` and no
    /// `host` field: the two must not differ (RFC 9113 §8.3.1), and servers
    /// that read `:authority` (hyper, Go) would otherwise never see the
    /// client's host, so `preserve_host` would do nothing.
    #[tokio::test]
    async fn an_http2_upstream_gets_the_host_as_its_authority_and_no_host_field() {
        let upstream = upstream_over("https://10.1.2.3:8443/base", true);
        let request = || {
            http::Request::get("/x?y=1")
                .header("host", "api.example.com")
                .body(())
                .unwrap()
        };
        let parts = prepared(request(), &upstream, true);
        assert_eq!(parts.uri, "https://api.example.com/base/x?y=1");
        assert_eq!(parts.headers.get("host"), None);
        assert_eq!(parts.headers["x-forwarded-host"], "api.example.com");

        let parts = prepared(request(), &upstream, false);
        assert_eq!(parts.uri, "https://10.1.2.3:8443/base/x?y=1");
        assert_eq!(parts.headers.get("host"), None);

        // From an HTTP/2 client: its `:authority`, whatever `host` said.
        let request = http::Request::get("https://api.example.com:444/x")
            .version(Version::HTTP_2)
            .header("host", "internal.example")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream, true);
        assert_eq!(parts.uri, "https://api.example.com:444/base/x");
        assert_eq!(parts.headers.get("host"), None);
    }

    /// A `Host` the gateway accepts (RFC 3986 allows `%` in a reg-name)
    /// but `http`'s URI grammar refuses must not fail the request: the
    /// upstream's own authority, with the field kept.
    #[tokio::test]
    async fn a_host_no_uri_can_hold_falls_back_to_the_upstreams_authority() {
        let upstream = upstream_over("http://127.0.0.1:3000", true);
        let request = http::Request::get("/x")
            .header("host", "a%2Db")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream, true);
        assert_eq!(parts.uri, "http://127.0.0.1:3000/x");
        assert_eq!(parts.headers["host"], "a%2Db");
        for host in ["[v1.x]", "[::1]:8443", "gw:8080"] {
            let request = http::Request::get("/x")
                .header("host", host)
                .body(())
                .unwrap();
            let parts = prepared(request, &upstream, true);
            assert_eq!(parts.uri.authority().map(|a| a.as_str()), Some(host));
            assert_eq!(parts.headers.get("host"), None, "{host}");
        }
    }

    #[tokio::test]
    async fn h2_authority_becomes_host_and_base_path_is_prefixed() {
        let request = http::Request::builder()
            .method("GET")
            .version(Version::HTTP_2)
            .uri("https://api.example.com/x")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream("http://127.0.0.1:3000/base"), true);
        assert_eq!(parts.uri, "/base/x");
        assert_eq!(parts.headers["host"], "api.example.com");
        assert_eq!(parts.version, Version::HTTP_11);

        // A `host` field beside a different `:authority` is not forwarded
        // as the upstream's Host: the gateway and the upstream would
        // disagree on which site a request is for.
        let request = http::Request::builder()
            .method("GET")
            .version(Version::HTTP_2)
            .uri("https://api.example.com/x")
            .header("host", "internal.example")
            .body(())
            .unwrap();
        let parts = prepared(request, &upstream("http://127.0.0.1:3000"), true);
        assert_eq!(parts.headers["host"], "api.example.com");
        assert_eq!(parts.headers["x-forwarded-host"], "api.example.com");

        let parts = prepared(
            http::Request::new(()),
            &upstream("http://127.0.0.1:3000"),
            false,
        );
        assert_eq!(parts.headers["host"], "127.0.0.1:3000");
    }
}

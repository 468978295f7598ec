//! The fields a proxy does not pass on, in either direction: those that
//! describe one connection (and any `Connection` names), and on requests
//! also `Proxy-*` and `Expect`.

use http::HeaderMap;
use http::header::{self, HeaderName};

use crate::wire::fields;

/// Removes a request's hop-by-hop headers, including every header named by
/// `Connection`, and its `Proxy-*` fields (`Proxy-Authorization` carries
/// credentials meant for a proxy, not for the upstream).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip(headers, is_hop_by_hop);
}

/// Removes an answer's hop-by-hop headers, including every header named by
/// `Connection`. `Proxy-Authenticate` and `Proxy-Authentication-Info` are
/// end-to-end (RFC 9110 §11.7): a 407 without its challenge is no answer.
pub fn strip_answer_hop_by_hop(headers: &mut HeaderMap) {
    strip(headers, is_connection_scoped);
}

fn strip(headers: &mut HeaderMap, hop_by_hop: fn(&HeaderName) -> bool) {
    // Most messages carry none (`Connection` is in the list): one look at each
    // name instead of a removal (a hash and a probe) per listed name.
    if !headers.keys().any(hop_by_hop) {
        return;
    }
    // Most that do (every answer from an upstream that keeps connections
    // open) carry only `Connection: keep-alive`: remove what is present, not
    // every name that could be.
    let listed: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    fields::remove_where(headers, |name| {
        hop_by_hop(name)
            || listed
                .iter()
                .any(|listed| listed.eq_ignore_ascii_case(name.as_str()))
    });
}

/// Whether a request header is not forwarded as it came: one that
/// describes the connection ([`is_connection_scoped`]), or of the
/// `Proxy-*` family; or `Expect`, which the gateway answers on its own hop
/// (its `100 Continue` went to the client when the body was first read), as
/// nginx and Envoy do: passed on, it would have the upstream send an interim
/// answer nobody waits for, or refuse (417) a request the client was already
/// told to send.
pub(super) fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_connection_scoped(name) || name.as_str().starts_with("proxy-") || name.as_str() == "expect"
}

/// Whether a header describes one connection, not the message (RFC 9110
/// §7.6.1: `Connection`, `Proxy-Connection`, `Keep-Alive`, `TE`, `Trailer`,
/// `Transfer-Encoding`, `Upgrade`).
pub(super) fn is_connection_scoped(name: &HeaderName) -> bool {
    // One `match` on the name's text: its length picks the candidates, so
    // the usual fields (host, content-type, date, ...) cost a comparison or
    // none. Every field of both heads is asked (docs/adr/0007-hot-path-costs.md).
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "proxy-connection"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_hop_by_hop_and_connection_named_headers() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "close, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic x"),
            ("te", "trailers"),
            ("trailer", "x-t"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("expect", "100-continue"),
            ("content-type", "application/json"),
            ("authorization", "Bearer t"),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        strip_hop_by_hop(&mut headers);
        // A removal moves the map's last entry into its place (as it always
        // did): what is left, not its order, is the contract.
        let mut left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["authorization", "content-type"]);
    }

    #[test]
    fn each_kind_alone_is_removed() {
        // The early return must not miss a message whose only hop-by-hop
        // header is any one of them.
        for name in [
            "connection",
            "te",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "expect",
        ] {
            let mut headers = HeaderMap::new();
            headers.append("content-type", "application/json".parse().unwrap());
            headers.append(name, "x".parse().unwrap());
            strip_hop_by_hop(&mut headers);
            let left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
            assert_eq!(left, vec!["content-type"], "{name}");
        }
    }

    /// A proxy's challenge is the client's to answer: an answer keeps it,
    /// and drops only what describes the upstream's connection.
    #[test]
    fn an_answer_keeps_its_proxy_challenge() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authenticate", "Basic realm=\"x\""),
            ("proxy-authentication-info", "nextnonce=\"n\""),
            ("upgrade", "h2c"),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        strip_answer_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["proxy-authenticate", "proxy-authentication-info"]);
    }

    #[test]
    fn names_that_only_look_alike_pass() {
        for name in [
            "content-type",
            "content-length",
            "tea",
            "trailers",
            "upgrade-insecure-requests",
            "proxy",
            "x-connection",
            "keep-alive-ish",
            "expected",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(!is_hop_by_hop(&name), "{name}");
        }
    }
}

use http::HeaderMap;
use http::header::{self, HeaderName};

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1),
/// plus the `Proxy-*` family.
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// Removes hop-by-hop headers, including every header named by `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP) {
        headers.remove(name);
    }
    let proxy_or_keep_alive: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name == "keep-alive" || name.starts_with("proxy-")
        })
        .cloned()
        .collect();
    for name in proxy_or_keep_alive {
        headers.remove(name);
    }
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
            ("content-type", "application/json"),
            ("authorization", "Bearer t"),
        ] {
            headers.append(name, value.parse().unwrap());
        }
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(left, vec!["content-type", "authorization"]);
    }
}

//! Why the Redis client refuses a URL, in words. The client says only
//! "invalid client config" (its own text quotes no part of the URL, but
//! says little either); the URL may carry a password, so what is said here
//! names the faulty part, never its value.

use std::fmt;

/// The first problem found in a `redis://` or `rediss://` URL, in the
/// order the client reads it (its `connection.rs`, `url_to_tcp_connection_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlProblem {
    /// Not a URL at all; `url::ParseError` describes without quoting.
    Unparsable(url::ParseError),
    NoHost,
    /// The host is a socket path, percent-encoded (`redis://%2Ftmp%2Fr.sock`).
    SocketPath,
    /// The host holds another percent-encoding, which no host name has.
    EncodedHost,
    /// An IPv6 address without its brackets (`redis://::1:6379`).
    Ipv6Unbracketed,
    /// `0.0.0.0` or `::`: an address to listen on, not to connect to.
    Wildcard,
    /// Port 0 is never connected to.
    PortZero,
    /// The path is not a database number (`/0`, `/7`).
    Database,
    /// A fragment other than `#insecure`.
    Fragment,
    /// `?protocol=` other than `2`, `3`, `resp2` or `resp3`.
    Protocol,
    /// The user name or the password, percent-decoded, is not UTF-8.
    NotUtf8(&'static str),
}

impl fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlProblem::Unparsable(error) => write!(f, "not a URL: {error}"),
            // `redis:///run/redis.sock` is how a socket path is often
            // first tried; the gateway takes its Redis over TCP only.
            UrlProblem::NoHost => write!(
                f,
                "the URL has no host: give the Redis server's host name or address \
                 (Unix sockets are not supported)"
            ),
            UrlProblem::SocketPath => write!(
                f,
                "the host is a socket path (\"%2F\" is \"/\"): give the Redis server's \
                 host name or address (Unix sockets are not supported)"
            ),
            UrlProblem::EncodedHost => write!(
                f,
                "the host is percent-encoded (\"%\"), which no host name is: write it as \
                 it is"
            ),
            UrlProblem::Ipv6Unbracketed => write!(
                f,
                "an IPv6 address is written in brackets, as in redis://[::1]:6379"
            ),
            UrlProblem::Wildcard => write!(
                f,
                "the host is a wildcard address (0.0.0.0 or ::), which cannot be connected \
                 to: give the Redis server's address"
            ),
            UrlProblem::PortZero => write!(f, "port 0 can never be connected to"),
            UrlProblem::Database => {
                write!(f, "the path must be a database number (\"/0\"), or nothing")
            }
            UrlProblem::Fragment => write!(f, "a URL fragment (#...) is not supported"),
            UrlProblem::Protocol => {
                write!(f, "the protocol parameter must be 2, 3, resp2 or resp3")
            }
            UrlProblem::NotUtf8(part) => {
                write!(f, "the {part}, percent-decoded, is not valid UTF-8")
            }
        }
    }
}

/// What is wrong with `text`, read as the Redis client reads it; `None`
/// when nothing is found here (the client's refusal is then told by kind).
pub fn problem(text: &str) -> Option<UrlProblem> {
    // The parser reads `::1:6379` as an empty host and a port, and says
    // only that.
    if host_and_port(text).is_some_and(|host| {
        !host.starts_with('[') && host.bytes().filter(|&b| b == b':').count() > 1
    }) {
        return Some(UrlProblem::Ipv6Unbracketed);
    }
    let url = match url::Url::parse(text) {
        Ok(url) => url,
        Err(error) => return Some(UrlProblem::Unparsable(error)),
    };
    let host = match url.host() {
        None => return Some(UrlProblem::NoHost),
        Some(url::Host::Domain("")) => return Some(UrlProblem::NoHost),
        // A `redis://` host is not decoded: the client would look up the
        // name as written, `%` and all.
        Some(url::Host::Domain(name)) if name.contains('%') => {
            let decoded = percent_encoding::percent_decode_str(name);
            return Some(match decoded.decode_utf8_lossy().contains('/') {
                true => UrlProblem::SocketPath,
                false => UrlProblem::EncodedHost,
            });
        }
        Some(url::Host::Domain(name)) => name.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
    };
    if host == "0.0.0.0" || host == "::" {
        return Some(UrlProblem::Wildcard);
    }
    if url.port() == Some(0) {
        return Some(UrlProblem::PortZero);
    }
    // `#insecure` is refused on its own, with what to do instead.
    if url
        .fragment()
        .is_some_and(|fragment| fragment != "insecure")
    {
        return Some(UrlProblem::Fragment);
    }
    let path = url.path().trim_matches('/');
    if !path.is_empty() && path.parse::<i64>().is_err() {
        return Some(UrlProblem::Database);
    }
    let decodes = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .is_ok()
    };
    if !decodes(url.username()) {
        return Some(UrlProblem::NotUtf8("user name"));
    }
    if !url.password().is_none_or(decodes) {
        return Some(UrlProblem::NotUtf8("password"));
    }
    let protocol = url.query_pairs().find(|(name, _)| name == "protocol");
    if protocol.is_some_and(|(_, value)| !matches!(&*value, "2" | "3" | "resp2" | "resp3")) {
        return Some(UrlProblem::Protocol);
    }
    None
}

/// What follows `scheme://` up to the path, without the user name and
/// password: the host and the port as written.
fn host_and_port(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    Some(
        authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host),
    )
}

#[cfg(test)]
mod tests {
    use super::{UrlProblem, problem};

    #[test]
    fn each_problem_is_named_without_the_password() {
        for (url, expected) in [
            ("redis://:pw@h:99999", None),
            ("redis://:pw@h:0", Some(UrlProblem::PortZero)),
            ("redis://:pw@[::]:6379", Some(UrlProblem::Wildcard)),
            ("redis://:pw@h/x", Some(UrlProblem::Database)),
            ("redis://:%FF@h", Some(UrlProblem::NotUtf8("password"))),
            ("redis://%FF@h", Some(UrlProblem::NotUtf8("user name"))),
            ("redis://h?protocol=4", Some(UrlProblem::Protocol)),
            ("rediss://h#x", Some(UrlProblem::Fragment)),
        ] {
            let found = problem(url);
            match expected {
                None => assert!(
                    matches!(found, Some(UrlProblem::Unparsable(_))),
                    "{url}: {found:?}"
                ),
                Some(expected) => assert_eq!(found, Some(expected), "{url}"),
            }
            assert!(!found.unwrap().to_string().contains("pw"), "{url}");
        }
        for good in [
            "redis://127.0.0.1:6379",
            "redis://[::1]:6379",
            "redis://:p%3Aw:x@h:6379",
            "rediss://:pw@cache.internal:6380/7?protocol=resp3",
            "rediss://h/#insecure",
            "redis://u:p%40ss@[::1]/",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
    }

    /// A socket path written as the host (`%2F` for `/`), as some clients
    /// take it, is refused as `redis:///path` is; a host with any other
    /// percent-encoding names no host either. Neither is connected to.
    #[test]
    fn a_percent_encoded_host_is_refused_a_socket_path_as_a_socket() {
        for url in [
            "redis://%2Ftmp%2Fr.sock",
            "redis://:pw@%2ftmp%2fr.sock:6379/0",
            "rediss://%2Frun%2Fredis.sock",
        ] {
            let found = problem(url).map(|problem| problem.to_string());
            let said = found.unwrap_or_default();
            assert!(
                said.contains("Unix sockets are not supported"),
                "{url}: {said}"
            );
            assert!(said.contains("socket path"), "{url}: {said}");
        }
        let said = problem("redis://cache%2Dinternal:6379")
            .map(|problem| problem.to_string())
            .unwrap_or_default();
        assert!(said.contains("percent-encoded"), "{said}");
        assert!(!said.contains("socket"), "{said}");
    }

    /// An IPv6 address without its brackets: the URL parser says only
    /// "empty host" (or a bad port); the message says how it is written.
    #[test]
    fn an_ipv6_address_without_brackets_is_said_to_need_them() {
        for url in [
            "redis://::1:6379",
            "redis://::1",
            "redis://:pw@::1:6379/0",
            "rediss://2001:db8::7:6380",
        ] {
            let said = problem(url)
                .map(|problem| problem.to_string())
                .unwrap_or_default();
            assert_eq!(
                said, "an IPv6 address is written in brackets, as in redis://[::1]:6379",
                "{url}"
            );
        }
    }
}

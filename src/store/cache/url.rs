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
    let url = match url::Url::parse(text) {
        Ok(url) => url,
        Err(error) => return Some(UrlProblem::Unparsable(error)),
    };
    let host = match url.host() {
        None => return Some(UrlProblem::NoHost),
        Some(url::Host::Domain("")) => return Some(UrlProblem::NoHost),
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
            "rediss://:pw@cache.internal:6380/7?protocol=resp3",
            "rediss://h/#insecure",
            "redis://u:p%40ss@[::1]/",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
    }
}

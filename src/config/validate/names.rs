//! Checks of single written values: tokens (methods, header names), names, paths,
//! URLs. Each returns the parsed value or a message for the operator.

use crate::config::quoted;
use http::{HeaderName, Method};

/// A method, upper-cased (`post` → `POST`). `http` takes exactly the RFC 9110
/// tokens as methods.
pub fn method(text: &str) -> Result<Method, String> {
    Method::from_bytes(text.to_ascii_uppercase().as_bytes())
        .map_err(|_| format!("{} is not a valid HTTP method name", quoted(text)))
}

/// The longest header name the file may write. `http` takes names of up
/// to 64 KiB, far past any field a client or upstream sends; a longer one
/// is a paste gone wrong.
pub const HEADER_NAME_MAX_BYTES: usize = 256;

/// The longest route, upstream or region name: each is a metric label and
/// a field of every log line about its requests.
pub const NAME_MAX_BYTES: usize = 128;

/// The longest environment variable name a `*_env` field may list.
pub const ENV_NAME_MAX_BYTES: usize = 256;

/// The longest `store.redis.key_prefix`: it starts every key in Redis.
pub const KEY_PREFIX_MAX_BYTES: usize = 256;

/// The longest query parameter or form field name a key is read from.
pub const PARAMETER_NAME_MAX_BYTES: usize = 256;

/// The longest JSON pointer a key is read from or a fingerprint names.
pub const JSON_POINTER_MAX_BYTES: usize = 1024;

/// `text` within `max` bytes; checked before its form, so that a paste of
/// a MiB is refused by its length, not quoted. `what` names it ("the key
/// prefix").
pub fn at_most(text: &str, what: &str, max: usize) -> Result<(), String> {
    match text.len() {
        len if len > max => Err(format!("{what} is {len} bytes long: at most {max} bytes")),
        _ => Ok(()),
    }
}

/// A header name, lower-cased (`X-Tenant` → `x-tenant`). `http` takes exactly
/// the RFC 9110 tokens as names.
pub fn header_name(text: &str) -> Result<HeaderName, String> {
    at_most(text, "the header name", HEADER_NAME_MAX_BYTES)?;
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| format!("{} is not a valid HTTP header name", quoted(text)))
}

/// The replay marker's (or the expiry header's) name: a valid header name
/// that is not one the answer needs for itself. The marker is set over any field of its name, so it
/// would clobber `Content-Type` or `Date`; a connection or framing field is
/// dropped or rewritten on the way out, taking the marker with it.
/// `what` names the field in messages ("the marker", "the expiry").
pub fn replay_header_name(text: &str, what: &str, example: &str) -> Result<HeaderName, String> {
    const CONNECTION: &[&str] = &[
        "connection",
        "content-length",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    // Fields an upstream's answers carry (RFC 9110, RFC 6265 and the
    // caching and security ones proxies see every day): the gateway's
    // field of that name would replace the upstream's own.
    const ANSWER: &[&str] = &[
        "accept-ranges",
        "age",
        "allow",
        "alt-svc",
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
        "content-location",
        "content-range",
        "content-security-policy",
        "content-type",
        "date",
        "etag",
        "expires",
        "idempotency-degraded",
        // A derived key's answers carry it (docs/keys-and-fingerprints.md).
        "idempotency-key",
        "idempotency-replay",
        "last-modified",
        // The gateway's own problems carry one when `problem_base` is set.
        "link",
        "location",
        "proxy-authenticate",
        "retry-after",
        "server",
        "set-cookie",
        "strict-transport-security",
        "vary",
        "www-authenticate",
    ];
    let name = header_name(text)?;
    if CONNECTION.contains(&name.as_str()) {
        Err(format!(
            "{} describes the connection, not the answer: {what} would be lost; \
             use a name of its own such as {example:?}",
            quoted(text)
        ))
    } else if ANSWER.contains(&name.as_str()) {
        Err(format!(
            "{} is a field answers carry: {what} would replace it; \
             use a name of its own such as {example:?}",
            quoted(text)
        ))
    } else {
        Ok(name)
    }
}

/// Route and upstream names appear in metric labels, logs and the `keys` command
/// line, so they stay plain.
pub fn name(text: &str) -> Result<String, String> {
    if text.len() > NAME_MAX_BYTES {
        return Err(format!(
            "the name is {} bytes long: at most {NAME_MAX_BYTES} bytes (letters, digits, \
             '-', '_' or '.'), as it labels metrics and log lines",
            text.len()
        ));
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{} is not a valid name: use letters, digits, '-', '_' or '.'",
            quoted(text)
        ))
    }
}

/// A path (`exact`) or path prefix to match: absolute, no query, no
/// whitespace, and no `.`/`..` segment (`%2e` too) where it could never
/// match: requests are matched with their dot segments resolved.
pub fn match_path(text: &str, exact: bool) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err(format!("{} must start with \"/\"", quoted(text)));
    }
    if text.contains(['?', '#']) || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{} must be a plain path: no query, fragment or whitespace",
            quoted(text)
        ));
    }
    // A request target is ASCII: a client sends `é` as `%C3%A9`, and a
    // target that is not ASCII is refused (400) before routes are looked at.
    if !text.is_ascii() {
        let encoded = percent_encoding::utf8_percent_encode(text, percent_encoding::CONTROLS);
        return Err(format!(
            "{} holds characters beyond ASCII, which no request path carries (clients send \
             them percent-encoded), so it would never match; percent-encode them: {}",
            quoted(text),
            quoted(&encoded.to_string())
        ));
    }
    let segments: Vec<&str> = text.split('/').collect();
    // A prefix's last segment may still begin a longer one (`/.` matches
    // `/.well-known`); anywhere else a dot segment is resolved away.
    let checked = if exact {
        &segments[..]
    } else {
        &segments[..segments.len() - 1]
    };
    if checked
        .iter()
        .any(|segment| crate::wire::dot_segment::is_dot_segment(segment))
    {
        return Err(format!(
            "{} has a \".\" or \"..\" segment: requests are matched with those \
             resolved, so it would never match; write the path they resolve to",
            quoted(text)
        ));
    }
    // Escapes are matched in either case: kept upper-case, as a request's
    // path is compared (src/route/table.rs).
    Ok(crate::wire::percent_case::upper_escapes(text).into_owned())
}

/// RFC 6901: empty (the whole body) or `/`-separated tokens with `~0`/`~1` escapes.
pub fn json_pointer(text: &str) -> Result<String, String> {
    at_most(text, "the JSON pointer", JSON_POINTER_MAX_BYTES)?;
    crate::key::pointer::check(text)
        .map(|()| text.to_owned())
        .map_err(|error| format!("{} {error}", quoted(error.written())))
}

/// A non-empty file path.
pub fn file_path(text: &str) -> Result<std::path::PathBuf, String> {
    if text.trim().is_empty() {
        Err("a file path cannot be empty".to_owned())
    } else {
        Ok(text.into())
    }
}

/// An upstream base URL: `http://` or `https://`, a host, nothing after the
/// authority but an optional "/" (the request path is forwarded as is).
pub fn upstream_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
        .ok_or_else(|| format!("{} must start with http:// or https://", quoted(text)))?;
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if authority.contains('@') {
        // Not quoted: the part before `@` is likely a password, and this
        // message goes to logs (a refused reload) and terminals.
        const REFUSAL: &str =
            "credentials in the URL are not supported (the URL is not repeated: it holds a secret)";
        return Err(REFUSAL.to_owned());
    }
    // `http::Uri` takes any bytes between brackets, and any after them; a
    // host without its brackets it refuses as an "invalid authority".
    if let Some(problem) = super::ip_literal::url_host_problem(authority) {
        return Err(format!("{} is not a valid URL: {problem}", quoted(text)));
    }
    let uri: http::Uri = text
        .parse()
        .map_err(|err| format!("{} is not a valid URL: {err}", quoted(text)))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{} has no host", quoted(text)));
    }
    // http::Uri accepts any digits as a port, and Rust's integer parse a
    // leading "+"; the socket takes 1..=65535 only (port 0 never connects).
    let after_host = authority.rsplit(']').next().unwrap_or(authority);
    if let Some((_, port)) = after_host.split_once(':') {
        let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
        match port.parse::<u16>() {
            Ok(0) if digits => {
                return Err(format!(
                    "{} has port 0, which can never be connected to",
                    quoted(text)
                ));
            }
            Ok(_) if digits => {}
            _ => {
                return Err(format!(
                    "{} has an invalid port: 1 to 65535, in digits",
                    quoted(text)
                ));
            }
        }
    }
    if tail.contains(['?', '#']) {
        return Err(format!(
            "{} must not have a query or fragment",
            quoted(text)
        ));
    }
    if !tail.is_empty() && tail != "/" {
        return Err(format!(
            "{} has a path; only scheme, host and port are allowed (the request path is forwarded unchanged)",
            quoted(text)
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_upper_cased_tokens() {
        assert_eq!(method("post"), Ok(Method::POST));
        assert_eq!(method("purge").unwrap(), "PURGE");
        assert_eq!(
            method("!#$%&'*+-.^_`|~09az").unwrap(),
            "!#$%&'*+-.^_`|~09AZ"
        );
        for bad in ["PO ST", "", "GET/", "a\"b", "é", "A:B"] {
            assert_eq!(
                method(bad),
                Err(format!("{bad:?} is not a valid HTTP method name"))
            );
        }
    }

    #[test]
    fn header_names_are_lower_cased_tokens() {
        assert_eq!(
            header_name("Idempotency-Key"),
            Ok(HeaderName::from_static("idempotency-key"))
        );
        assert_eq!(
            header_name("X-!#$%&'*+-.^_`|~09").unwrap(),
            "x-!#$%&'*+-.^_`|~09"
        );
        for bad in ["Bad Header", "a:b", "", "x\"y", "(x)", "é"] {
            assert_eq!(
                header_name(bad),
                Err(format!("{bad:?} is not a valid HTTP header name"))
            );
        }
    }

    #[test]
    fn json_pointers() {
        assert!(json_pointer("").is_ok());
        assert!(json_pointer("/id").is_ok());
        assert!(json_pointer("/a~1b/~0").is_ok());
        assert!(json_pointer("id").is_err());
        assert!(json_pointer("/a~2").is_err());
        assert!(json_pointer("/a~").is_err());
    }

    #[test]
    fn upstream_urls() {
        for good in [
            "http://127.0.0.1:3000",
            "https://api.example.com",
            "http://[::1]:80/",
            "http://svc",
        ] {
            assert!(upstream_url(good).is_ok(), "{good}");
        }
        for bad in [
            "127.0.0.1:3000",
            "ftp://x",
            "http://",
            "http://h/?a=1",
            "http://h?a=1",
            "http://h/base",
            "http://u:p@h",
            "http://h:99999",
        ] {
            assert!(upstream_url(bad).is_err(), "{bad}");
        }
        // Port 0 can never be dialled; a sign or a space is no port at all
        // (Rust's integer parse would take "+80" as 80).
        for bad in [
            "http://h:0",
            "https://[::1]:0/",
            "http://h:+80",
            "http://h:-1",
        ] {
            let message = upstream_url(bad).unwrap_err();
            assert!(message.contains("port"), "{bad}: {message}");
        }
        let refusal = upstream_url("http://user:hunter2@h").unwrap_err();
        assert!(!refusal.contains("hunter2"), "{refusal}");
    }

    #[test]
    fn match_paths() {
        assert!(match_path("/v1/charges", false).is_ok());
        assert!(match_path("v1", false).is_err());
        assert!(match_path("/a?b", false).is_err());
        assert!(match_path("/a b", false).is_err());
        let beyond_ascii = match_path("/café", true).unwrap_err();
        assert!(beyond_ascii.ends_with(": \"/caf%C3%A9\""), "{beyond_ascii}");
        assert_eq!(match_path("/caf%c3%A9", true).unwrap(), "/caf%C3%A9");
    }
}

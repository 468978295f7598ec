//! How an IPv6 address is written where a port or a URL's path may follow
//! it: in brackets (RFC 3986 §3.2.2). Each check names what is wrong, for
//! the message of `listen`, `admin_listen`, an upstream's `url` and a
//! region's `gateway`.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::quoted;

/// Why `text`, refused as a listener's `IP:PORT`, is no such address; `None`
/// when nothing more precise than "not an address" can be said.
pub fn listen_problem(text: &str) -> Option<&'static str> {
    if text.parse::<Ipv4Addr>().is_ok() || bracketed(text).is_some_and(is_ipv6) {
        return Some("it has no port");
    }
    if let Some(inside) = bracketed_before_port(text)
        && let Some((address, zone)) = inside.split_once('%')
        && address.parse::<Ipv6Addr>().is_ok()
        && !zone.bytes().all(|b| b.is_ascii_digit())
    {
        return Some(
            "the zone of a link-local IPv6 address is its interface's number (`ip link` \
             lists it), not its name, as in \"[fe80::1%2]:8080\"",
        );
    }
    if !text.starts_with('[') && text.bytes().filter(|&b| b == b':').count() > 1 {
        return Some(
            "an IPv6 address is written in brackets before its port, as in \"[::1]:8080\"",
        );
    }
    None
}

/// What is wrong with the host of a URL's `authority` (what follows
/// `scheme://` up to the path), as far as brackets go: `None` for a host
/// without brackets and one colon at most, or an IPv6 address in brackets
/// with nothing after them but a port.
pub fn url_host_problem(authority: &str) -> Option<String> {
    let Some(rest) = authority.strip_prefix('[') else {
        return (authority.bytes().filter(|&b| b == b':').count() > 1).then(|| {
            "an IPv6 address is written in brackets, as in \"http://[2001:db8::1]:8080\"".to_owned()
        });
    };
    let Some((inside, after)) = rest.split_once(']') else {
        return Some("its `[` is never closed by `]`".to_owned());
    };
    if inside.contains('%') {
        return Some(
            "its IPv6 address has a zone (`%25…`), which is not supported: use an address \
             that needs none (a global or unique-local one)"
                .to_owned(),
        );
    }
    if !is_ipv6(inside) {
        return Some(format!(
            "{} is not an IPv6 address: brackets hold one; an IPv4 address or a \
             name is written without them",
            quoted(&format!("[{inside}]"))
        ));
    }
    if !after.is_empty() && !after.starts_with(':') {
        return Some(format!(
            "{} after the brackets is not a port (\":\" and digits)",
            quoted(after)
        ));
    }
    None
}

fn is_ipv6(text: &str) -> bool {
    text.parse::<Ipv6Addr>().is_ok()
}

/// What is between the brackets of `[…]`, the whole of `text`.
fn bracketed(text: &str) -> Option<&str> {
    text.strip_prefix('[')?.strip_suffix(']')
}

/// What is between the brackets of `[…]:PORT`.
fn bracketed_before_port(text: &str) -> Option<&str> {
    let (host, _) = text.rsplit_once(':')?;
    bracketed(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_is_refused_for_what_is_wrong_with_it() {
        for (text, words) in [
            ("::1", "in brackets"),
            ("[::1]", "no port"),
            ("10.0.0.1", "no port"),
            ("[fe80::1%eth0]:80", "interface's number"),
            ("::1:80", "in brackets"),
            ("fe80::1%2:80", "in brackets"),
        ] {
            let problem = listen_problem(text).unwrap_or_default();
            assert!(problem.contains(words), "{text}: {problem}");
        }
        for text in ["nowhere", "host:80", "[::1]:x", "[fe80::1%2]:x"] {
            assert_eq!(listen_problem(text), None, "{text}");
        }
    }

    #[test]
    fn a_url_host_in_brackets_is_an_ipv6_address_and_a_port_at_most() {
        for authority in [
            "h",
            "h:80",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:",
            "[::1]:80",
            "[2001:DB8::a]:1",
        ] {
            assert_eq!(url_host_problem(authority), None, "{authority}");
        }
        for (authority, words) in [
            ("::1", "in brackets"),
            ("::1:80", "in brackets"),
            ("[::1", "never closed"),
            ("[]", "not an IPv6 address"),
            ("[127.0.0.1]:80", "not an IPv6 address"),
            ("[h]:80", "not an IPv6 address"),
            ("[v1.x]", "not an IPv6 address"),
            ("[::1]x:80", "after the brackets"),
            ("[::1]]:80", "after the brackets"),
            ("[fe80::1%25eth0]:80", "zone"),
        ] {
            let problem = url_host_problem(authority).unwrap_or_default();
            assert!(problem.contains(words), "{authority}: {problem}");
        }
    }
}

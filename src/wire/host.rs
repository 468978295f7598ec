//! The `Host` grammar (RFC 9110 §7.2, RFC 3986 §3.2.2): `uri-host [ ":"
//! port ]`. RFC 9112 §3.2 has a server answer 400 to a request whose `Host`
//! is not that; forwarded, `Host: a b`, `user@evil` or `x/y` would be read
//! one way by the gateway's routes and logs and another by the upstream
//! (virtual hosts, absolute links, cache keys). A byte scan: no allocation.

use std::net::Ipv6Addr;

/// Whether `value` (a `Host` field value, or the authority of a target) is
/// `uri-host [ ":" port ]` with a host that is not empty. The empty value
/// RFC 9112 §3.2 keeps for targets without an authority names no site an
/// http(s) gateway could forward to, and is refused as nginx refuses it.
pub fn is_valid(value: &[u8]) -> bool {
    let (host, port) = match value.first() {
        Some(b'[') => match value.iter().position(|&b| b == b']') {
            Some(end) => (&value[..=end], &value[end + 1..]),
            None => return false,
        },
        _ => match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &[][..]),
        },
    };
    let port_ok = match port.split_first() {
        None => true,
        // `port = *DIGIT`: "host:" is allowed by the grammar.
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    port_ok && !host.is_empty() && is_uri_host(host)
}

fn is_uri_host(host: &[u8]) -> bool {
    match host {
        [b'[', literal @ .., b']'] => is_ip_literal(literal),
        // IPv4address is a reg-name too, as far as bytes go.
        reg_name => is_reg_name(reg_name),
    }
}

/// `reg-name = *( unreserved / pct-encoded / sub-delims )`. Every request's
/// `Host` is checked here, so the usual name (no `%`) is one table look-up
/// per byte (docs/adr/0007-hot-path-costs.md).
fn is_reg_name(name: &[u8]) -> bool {
    let mut at = 0;
    while at < name.len() {
        match name[at] {
            b'%' => {
                let hex = name.get(at + 1..at + 3);
                if !hex.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                at += 3;
                continue;
            }
            byte if REG_NAME_BYTE[usize::from(byte)] => {}
            _ => return false,
        }
        at += 1;
    }
    true
}

/// `unreserved / sub-delims`, by byte.
const REG_NAME_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = is_unreserved(byte as u8) || is_sub_delim(byte as u8);
        byte += 1;
    }
    table
};

/// `IPv6address / IPvFuture` between the brackets.
fn is_ip_literal(literal: &[u8]) -> bool {
    match literal {
        // `IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )`
        [b'v' | b'V', rest @ ..] => {
            let Some(dot) = rest.iter().position(|&b| b == b'.') else {
                return false;
            };
            let (version, tail) = (&rest[..dot], &rest[dot + 1..]);
            !version.is_empty()
                && version.iter().all(u8::is_ascii_hexdigit)
                && !tail.is_empty()
                && tail
                    .iter()
                    .all(|&b| is_unreserved(b) || is_sub_delim(b) || b == b':')
        }
        _ => std::str::from_utf8(literal)
            .ok()
            .is_some_and(|text| text.parse::<Ipv6Addr>().is_ok()),
    }
}

const fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

const fn is_sub_delim(byte: u8) -> bool {
    matches!(
        byte,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_uri_host_with_a_port_or_not_is_valid() {
        for host in [
            "api.example.com",
            "API.Example.COM.",
            "localhost:8080",
            "gw:",
            "127.0.0.1",
            "127.0.0.1:443",
            "[::1]",
            "[::1]:8443",
            "[2001:db8::1]",
            "[::ffff:192.0.2.1]:80",
            "[v1.fe80::a+en1]",
            "[V7.x:y]:1",
            "xn--bcher-kva.example",
            "a%20b",
            "under_score~tilde",
            "!$&'()*+,;=",
            "a:00080",
        ] {
            assert!(is_valid(host.as_bytes()), "{host:?}");
        }
    }

    #[test]
    fn what_is_not_uri_host_is_invalid() {
        for host in [
            "",
            ":80",
            "a b",
            "user@evil",
            "user:pw@evil",
            "x/y",
            "x?y",
            "x#y",
            "x\\y",
            "a:b",
            "a:80:90",
            "a:-1",
            "a:8 0",
            "[::1",
            "::1",
            "[::1]x",
            "[::1]:x",
            "[]",
            "[::g]",
            "[fe80::1%25eth0]",
            "[fe80::1%eth0]:80",
            "[1.2.3.4]",
            "[v.x]",
            "[v1.]",
            "[vz.x]",
            "[v1.a/b]",
            "a%2",
            "a%zz",
            "ex\"ample",
            "ex<ample>",
            "é.example",
            "a\tb",
        ] {
            assert!(!is_valid(host.as_bytes()), "{host:?}");
        }
    }
}

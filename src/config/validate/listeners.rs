//! Whether `listen` and `admin_listen` can both be bound: `serve` binds one
//! after the other, and the second fails with "address in use" when the two
//! share a port on some address.

use std::net::{IpAddr, SocketAddr};

/// Why the two listeners cannot both be bound, for the message; `None` when
/// they can.
pub fn clash(listen: SocketAddr, admin: SocketAddr) -> Option<String> {
    // Port 0 asks the system for a fresh port, one per listener.
    if listen.port() != admin.port() || listen.port() == 0 {
        return None;
    }
    let (a, b) = (plain(listen.ip()), plain(admin.ip()));
    if a == b {
        return Some(format!(
            "listen and admin_listen are both {listen}; they must differ"
        ));
    }
    let (wildcard, other) = if a.is_unspecified() && covers(a, b) {
        (listen, admin)
    } else if b.is_unspecified() && covers(b, a) {
        (admin, listen)
    } else {
        return None;
    };
    Some(format!(
        "{wildcard} takes port {} on every address, {other} included: the two listeners \
         cannot both bind; give them different ports",
        listen.port()
    ))
}

/// An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) is the IPv4 one.
fn plain(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Whether a socket bound to the unspecified address `wildcard` takes the
/// port on `other` too. `0.0.0.0` covers IPv4; `[::]` covers IPv6 and, as
/// Linux binds it dual-stack by default, IPv4 as well.
fn covers(wildcard: IpAddr, other: IpAddr) -> bool {
    match wildcard {
        IpAddr::V4(_) => other.is_ipv4(),
        IpAddr::V6(_) => true,
    }
}

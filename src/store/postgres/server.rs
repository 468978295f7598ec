//! Where the store connects, as a log line or an error names it: each host
//! of the URL with its port (`db.internal:5432`, `[2001:db8::5]:5432`), a
//! Unix socket by its file (`/var/run/postgresql/.s.PGSQL.5432`). Made of
//! the parsed connection settings, which keep the password apart: it is
//! never part of the text.

use std::net::SocketAddr;

use tokio_postgres::Config;
use tokio_postgres::config::Host;

/// Every server the settings try, in their order, joined by ", ".
pub fn named(settings: &Config) -> String {
    let (hosts, addrs, ports) = (
        settings.get_hosts(),
        settings.get_hostaddrs(),
        settings.get_ports(),
    );
    (0..hosts.len().max(addrs.len()))
        .filter_map(|i| {
            // One port for all, one per host, or PostgreSQL's own.
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            Some(match (hosts.get(i), addrs.get(i)) {
                // `hostaddr` is what is dialed; the host name is for TLS.
                (Some(Host::Tcp(host)), Some(addr)) => {
                    format!("{} ({host})", SocketAddr::new(*addr, port))
                }
                (_, Some(addr)) => SocketAddr::new(*addr, port).to_string(),
                (Some(Host::Tcp(host)), None) if host.contains(':') => format!("[{host}]:{port}"),
                (Some(Host::Tcp(host)), None) => format!("{host}:{port}"),
                (Some(Host::Unix(dir)), None) => {
                    dir.join(format!(".s.PGSQL.{port}")).display().to_string()
                }
                (None, None) => return None,
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_named_by_address_and_port_never_by_password() {
        for (url, named_as) in [
            ("postgres://u:secret@db.internal/d", "db.internal:5432"),
            ("postgres://u:secret@127.0.0.1:6543/d", "127.0.0.1:6543"),
            (
                "postgres://u:secret@[2001:db8::5]:6543/d",
                "[2001:db8::5]:6543",
            ),
            (
                "host=a,b port=5433,5434 user=u password=secret",
                "a:5433, b:5434",
            ),
            ("host=a,b port=5433 password=secret", "a:5433, b:5433"),
            (
                "postgres://u:secret@/d?host=/var/run/postgresql",
                "/var/run/postgresql/.s.PGSQL.5432",
            ),
            (
                "host=db.internal hostaddr=10.0.0.5 password=secret",
                "10.0.0.5:5432 (db.internal)",
            ),
            ("hostaddr=::1 port=6543", "[::1]:6543"),
        ] {
            let settings: Config = url.parse().unwrap();
            let text = named(&settings);
            assert_eq!(text, named_as, "{url}");
            assert!(!text.contains("secret"));
        }
    }
}

//! An upstream's host name to its addresses, by the system's resolver
//! (`getaddrinfo`, on tokio's blocking pool), once for each new connection:
//! an upstream whose addresses change (a Kubernetes Service, pods that come
//! and go) is reached at its new ones by the next connection opened. A
//! name that does not resolve is a [`ResolveError`] naming it, so the log
//! says which name failed, not a bare "Name or service not known".

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// The name did not resolve, or resolved to no address.
#[derive(Debug, thiserror::Error)]
#[error("{host} does not resolve")]
pub struct ResolveError {
    pub host: String,
    #[source]
    pub source: io::Error,
}

/// The addresses of `host` (an IP address is its own), each with `port`,
/// in the resolver's order; never empty.
pub async fn addresses(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let failed = |source| ResolveError {
        host: host.to_string(),
        source,
    };
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(failed)?
        .collect();
    if found.is_empty() {
        return Err(failed(io::Error::new(
            io::ErrorKind::NotFound,
            "it has no address",
        )));
    }
    Ok(found)
}

/// The resolver of the HTTP/2 dialer's connector: [`addresses`], so that
/// its failures read as the HTTP/1 dialer's do.
#[derive(Debug, Clone, Copy, Default)]
pub struct NameResolver;

impl tower_service::Service<Name> for NameResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    // Boxed: a name is resolved once per new connection.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        // The connector puts the url's port on each address.
        Box::pin(async move { Ok(addresses(name.as_str(), 0).await?.into_iter()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name that never resolves (RFC 6761) is named in the error; an IP
    /// address needs no resolver; `localhost` resolves.
    #[tokio::test]
    async fn names_resolve_or_say_which_did_not() {
        let error = addresses("no-such-host.invalid", 80).await.unwrap_err();
        assert_eq!(error.host, "no-such-host.invalid");
        assert_eq!(error.to_string(), "no-such-host.invalid does not resolve");

        let literal = addresses("::1", 8080).await.unwrap();
        assert_eq!(literal, vec!["[::1]:8080".parse().unwrap()]);

        let local = addresses("localhost", 8080).await.unwrap();
        assert!(
            local
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 8080),
            "{local:?}"
        );
    }
}

//! An upstream's host name to its addresses, by the system's resolver
//! (`getaddrinfo`, on tokio's blocking pool), once for each new connection:
//! an upstream whose addresses change (a Kubernetes Service, pods that come
//! and go) is reached at its new ones by the next connection opened. A
//! name that does not resolve is a [`ResolveError`] naming it, so the log
//! says which name failed, not a bare "Name or service not known".
//! Connections opening while a name is being looked up share that lookup
//! ([`Resolver`]): a DNS server that does not answer holds one blocking
//! thread per name, not one per connection tried.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, FutureExt, Shared};
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
    SYSTEM.addresses(host, port).await
}

/// A blocking lookup of a name's addresses (their port 0): the system's
/// resolver, or a stand-in given to [`Resolver::new`].
type Lookup = fn(&str) -> io::Result<Vec<SocketAddr>>;

/// What one lookup found, for each connection waiting on it: the
/// addresses, or the error's kind and text.
type Found = Result<Arc<[SocketAddr]>, (io::ErrorKind, Arc<str>)>;

type Running = Shared<BoxFuture<'static, Found>>;

type InFlight = Arc<Mutex<HashMap<String, Running>>>;

/// Names being looked up at once, most; past them a lookup is not shared.
/// Each is an upstream's or a region gateway's, from the configuration.
const MOST_NAMES: usize = 1024;

static SYSTEM: LazyLock<Resolver> =
    LazyLock::new(|| Resolver::new(|host| Ok((host, 0).to_socket_addrs()?.collect())));

/// Runs each lookup on a blocking thread, which nothing can stop before the
/// system's resolver gives up (5 s x 2 tries by default, when DNS does not
/// answer): a connection that needs a name (to any port) while it is being
/// looked up waits for that lookup, so a name holds one blocking thread at
/// most, however many connections open meanwhile or give up on it. Once
/// the lookup ends nothing of it is kept: the next connection looks the
/// name up again.
struct Resolver {
    lookup: Lookup,
    in_flight: InFlight,
}

impl Resolver {
    fn new(lookup: Lookup) -> Self {
        Resolver {
            lookup,
            in_flight: InFlight::default(),
        }
    }

    async fn addresses(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let failed = |source| ResolveError {
            host: host.to_string(),
            source,
        };
        let found = self
            .running(host)
            .await
            .map_err(|(kind, text)| failed(io::Error::new(kind, text.to_string())))?;
        if found.is_empty() {
            return Err(failed(io::Error::new(
                io::ErrorKind::NotFound,
                "it has no address",
            )));
        }
        let with_port = |mut address: SocketAddr| {
            address.set_port(port);
            address
        };
        Ok(found.iter().copied().map(with_port).collect())
    }

    /// The lookup of `host` running, or a new one.
    fn running(&self, host: &str) -> Running {
        let key = host.to_string();
        let mut in_flight = lock(&self.in_flight);
        if let Some(running) = in_flight.get(&key) {
            return running.clone();
        }
        let (send, found) = tokio::sync::oneshot::channel();
        let running = async move {
            found.await.unwrap_or_else(|_| {
                Err((
                    io::ErrorKind::Interrupted,
                    Arc::from("the lookup was cut short"),
                ))
            })
        }
        .boxed()
        .shared();
        let ends = (in_flight.len() < MOST_NAMES).then(|| {
            in_flight.insert(key.clone(), running.clone());
            Ends {
                in_flight: Arc::clone(&self.in_flight),
                key: key.clone(),
            }
        });
        drop(in_flight);
        let lookup = self.lookup;
        // `ends` goes with the closure: the entry is removed once the lookup
        // ends, panics, or never starts (the runtime shutting down).
        tokio::task::spawn_blocking(move || {
            let found = lookup(&key);
            drop(ends);
            let _ = send.send(match found {
                Ok(addresses) => Ok(addresses.into()),
                Err(e) => Err((e.kind(), e.to_string().into())),
            });
        });
        running
    }
}

/// Removes a lookup from those in flight when dropped.
struct Ends {
    in_flight: InFlight,
    key: String,
}

impl Drop for Ends {
    fn drop(&mut self) {
        lock(&self.in_flight).remove(&self.key);
    }
}

fn lock(in_flight: &InFlight) -> MutexGuard<'_, HashMap<String, Running>> {
    in_flight.lock().unwrap_or_else(|e| e.into_inner())
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures_util::future::join_all;

    use super::*;

    static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

    /// A resolver that takes 300 ms to answer, as one whose server is slow,
    /// and counts its lookups.
    fn slow_lookup(host: &str) -> io::Result<Vec<SocketAddr>> {
        LOOKUPS.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        match host {
            "down.test" => Err(io::Error::other("no answer from the server")),
            _ => Ok(vec![SocketAddr::from(([127, 0, 0, 9], 0))]),
        }
    }

    /// 50 connections opening at once to one name (to two ports) run one lookup, which
    /// holds one blocking thread; all 50 get its addresses, or its error
    /// naming the host. Nothing is kept once it ends: the next connection
    /// looks the name up again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_opening_at_once_share_one_lookup_of_a_name() {
        let resolver = Resolver::new(slow_lookup);
        let resolver = &resolver;
        let port = |i| [8080, 9090][i % 2];
        let all = join_all((0..50).map(|i| resolver.addresses("api.test", port(i)))).await;
        assert_eq!(LOOKUPS.load(Ordering::SeqCst), 1, "lookups for 50 at once");
        for (i, found) in all.into_iter().enumerate() {
            let expected = SocketAddr::from(([127, 0, 0, 9], port(i)));
            assert_eq!(found.unwrap(), vec![expected]);
        }

        resolver.addresses("api.test", 8080).await.unwrap();
        assert_eq!(LOOKUPS.load(Ordering::SeqCst), 2, "none kept once done");

        let failed = join_all((0..50).map(|_| resolver.addresses("down.test", 80))).await;
        assert_eq!(LOOKUPS.load(Ordering::SeqCst), 3);
        for error in failed {
            let error = error.unwrap_err();
            assert_eq!(error.host, "down.test");
            assert_eq!(error.source.to_string(), "no answer from the server");
        }
    }

    static ABANDONED: AtomicUsize = AtomicUsize::new(0);
    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    static MOST_RUNNING: AtomicUsize = AtomicUsize::new(0);

    /// A resolver whose server does not answer for 800 ms; counts its
    /// lookups and the most running at once.
    fn unanswered_lookup(_host: &str) -> io::Result<Vec<SocketAddr>> {
        ABANDONED.fetch_add(1, Ordering::SeqCst);
        let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
        MOST_RUNNING.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(800));
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        Ok(vec![SocketAddr::from(([127, 0, 0, 9], 0))])
    }

    /// Connections that give up on a lookup (their connect_timeout passed)
    /// leave it running, and those opening after them wait for that same
    /// lookup: one blocking thread for the name throughout. It is let go
    /// once it ends, and the next connection looks the name up again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lookup_given_up_on_still_holds_one_thread_and_ends() {
        let resolver = Resolver::new(unanswered_lookup);
        let resolver = &resolver;
        let impatient = || async {
            let within = Duration::from_millis(30);
            tokio::time::timeout(within, resolver.addresses("slow.test", 80)).await
        };
        for _ in 0..5 {
            let all = join_all((0..40).map(|_| impatient())).await;
            assert!(all.iter().all(|gave_up| gave_up.is_err()));
        }
        assert_eq!(ABANDONED.load(Ordering::SeqCst), 1, "lookups");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(lock(&resolver.in_flight).len(), 0, "let go once ended");
        let found = resolver.addresses("slow.test", 80).await.unwrap();
        assert_eq!(found, vec!["127.0.0.9:80".parse().unwrap()]);
        assert_eq!(ABANDONED.load(Ordering::SeqCst), 2, "looked up again");
        assert_eq!(MOST_RUNNING.load(Ordering::SeqCst), 1, "most at once");
    }

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

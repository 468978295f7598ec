//! One upstream (`Upstream`: a configured one, or another region's
//! gateway): its address, its connections (kept across a reload that
//! leaves their settings as they were), and `send`, which every request
//! sent on goes through; `Upstreams`, a config's upstreams by name.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, StatusCode, Uri};

use super::error::{Cause, UpstreamError};
use super::handover::Handover;
use super::http1::{Dialer, Http1Pool, PoolLimits};
use super::http2::{self, Http2Connections, Http2Upstream};
use super::progress::{Marking, Progress, Wait, within};
use super::setup_error::UpstreamSetupError;
use super::strip_answer_hop_by_hop;
use super::upstream_body::UpstreamBody;
use crate::body::Body;
use crate::config::{Config, UpstreamConfig};
use crate::wire::{fields, framing};
use http_body_util::BodyExt;
use tokio::time::Instant;

/// One configured upstream with its own connections: a pool (HTTP/1) or
/// one multiplexed connection at a time (HTTP/2).
#[derive(Debug)]
pub struct Upstream {
    name: String,
    scheme: Scheme,
    authority: Authority,
    /// Where its connections are dialed, as the log names it: the url's
    /// host and port, the scheme's port when the url gives none.
    address: String,
    /// `authority` as a `Host` value, made once.
    host_header: Option<HeaderValue>,
    /// Path of the upstream URL without its trailing slash ("" for none),
    /// prefixed to every forwarded path.
    base_path: String,
    timeout: Duration,
    http2: bool,
    connections: Connections,
    /// What `connections` were made for.
    made_for: ConnectionSettings,
}

/// The settings an upstream's connections are made by: a reload that
/// leaves them as they were hands the running connections on to the new
/// config, so that `max_connections` (HTTP/1) and the one connection
/// (HTTP/2) hold across reloads, and idle connections are not dropped.
#[derive(Debug, PartialEq)]
struct ConnectionSettings {
    url: String,
    connect_timeout: Duration,
    http2: bool,
    keep_alive: bool,
    max_connections: usize,
    /// Over https, the trust as read (every root, the client certificate
    /// and key): a reload reads it again, and keeps the connections only
    /// when it finds the same (a rotated CA or certificate makes new ones).
    trust: Option<crate::tls::TrustRead>,
}

/// HTTP/1 upstreams get the gateway's own client (http1/); an HTTP/2 one
/// its one multiplexed connection (http2/mod.rs).
#[derive(Debug, Clone)]
enum Connections {
    Http1(Arc<Http1Pool>),
    Http2(Http2Upstream),
}

/// `host:port` of `authority`, with the scheme's port when it names none;
/// an IPv6 host keeps its brackets.
fn address(scheme: &Scheme, authority: &Authority) -> String {
    let port = authority
        .port_u16()
        .unwrap_or(if *scheme == Scheme::HTTPS { 443 } else { 80 });
    format!("{}:{port}", authority.host())
}

/// How long an unused upstream connection is kept open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl Upstream {
    pub fn new(config: &UpstreamConfig) -> Result<Self, UpstreamSetupError> {
        Self::renewed(config, None)
    }

    /// As `new`, but on the connections of `running` (the upstream of this
    /// name in the config being replaced) when they were made by the same
    /// settings (over https, the same trust as read again).
    pub fn renewed(
        config: &UpstreamConfig,
        running: Option<&Upstream>,
    ) -> Result<Self, UpstreamSetupError> {
        let uri: Uri = config
            .url
            .parse()
            .map_err(|source| UpstreamSetupError::InvalidUrl {
                upstream: config.name.clone(),
                source,
            })?;
        let scheme = uri.scheme().cloned().unwrap_or(Scheme::HTTP);
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| UpstreamSetupError::NoHost {
                upstream: config.name.clone(),
            })?;
        let base_path = uri.path().trim_end_matches('/').to_string();
        let tls = if scheme == Scheme::HTTPS {
            Some(crate::tls::client_config_read(
                &config.name,
                config.tls.as_ref(),
            )?)
        } else {
            None
        };
        let made_for = ConnectionSettings {
            url: config.url.clone(),
            connect_timeout: config.connect_timeout,
            http2: config.http2,
            keep_alive: config.keep_alive,
            max_connections: config.max_connections,
            trust: tls.as_ref().map(|(_, read)| read.clone()),
        };
        let kept = running.filter(|running| running.made_for == made_for);
        let connections = match kept {
            Some(running) => running.connections.clone(),
            None => {
                let tls = tls.map(|(config, _)| config);
                Self::fresh_connections(config, &uri, &scheme, &authority, tls)?
            }
        };
        Ok(Self {
            name: config.name.clone(),
            address: address(&scheme, &authority),
            scheme,
            host_header: HeaderValue::from_str(authority.as_str()).ok(),
            authority,
            base_path,
            timeout: config.timeout,
            http2: config.http2,
            connections,
            made_for,
        })
    }

    /// A new pool (HTTP/1) or connection holder (HTTP/2), with no connection
    /// yet, on `tls` when it was read already.
    fn fresh_connections(
        config: &UpstreamConfig,
        uri: &Uri,
        scheme: &Scheme,
        authority: &Authority,
        tls: Option<rustls::ClientConfig>,
    ) -> Result<Connections, UpstreamSetupError> {
        let tls = match tls {
            Some(tls) => tls,
            None => crate::tls::client_config(&config.name, config.tls.as_ref())?,
        };
        Ok(if config.http2 {
            let connections = Arc::new(Http2Connections::default());
            let dialer = http2::dialer(tls, config.connect_timeout, connections.clone());
            Connections::Http2(Http2Upstream::new(
                dialer,
                uri.clone(),
                IDLE_TIMEOUT,
                config.connect_timeout,
                connections,
            ))
        } else {
            let dialer = Dialer::new(scheme, authority, tls).map_err(|source| {
                UpstreamSetupError::Dialer {
                    upstream: config.name.clone(),
                    source,
                }
            })?;
            let limits = PoolLimits {
                max_connections: config.max_connections,
                connect_timeout: config.connect_timeout,
                idle_timeout: IDLE_TIMEOUT,
                keep_alive: config.keep_alive,
            };
            Connections::Http1(Http1Pool::new(dialer, authority, limits))
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `host:port` its connections are dialed to (`[::1]:8443` for an
    /// IPv6 address), for the log.
    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    pub fn host_header(&self) -> Option<&HeaderValue> {
        self.host_header.as_ref()
    }

    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    pub fn http2(&self) -> bool {
        self.http2
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends the request and waits for the answer head, at most `timeout`
    /// (see [`Wait`] for when it starts); the body then fails if the upstream
    /// sends nothing for `timeout`.
    /// The answer carries end-to-end headers only: the HTTP/1 client never
    /// puts connection-scoped ones in the map, and they are stripped here
    /// from an HTTP/2 answer. `handover` tells whether the request went out,
    /// and may stop it before (see [`Handover`]).
    pub async fn send(
        &self,
        request: Request<Body>,
        wait: Wait,
        handover: &Handover,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        match &self.connections {
            Connections::Http1(pool) => {
                let response = pool.send(request, self.timeout, wait, handover).await?;
                Ok(response.map(|body| UpstreamBody::http1(body, self.timeout)))
            }
            Connections::Http2(http2) => {
                // Waiting for a stream counts as nothing sent: hyper never
                // has the request until it gets a place (http2/streams.rs).
                let (place, waited) = http2.place(self.timeout).await?;
                let left = match waited {
                    Some(since) => self.timeout.saturating_sub(since.elapsed()),
                    None => self.timeout,
                };
                if left.is_zero() {
                    return Err(UpstreamError::NotSent(Cause::NoTimeLeft));
                }
                // hyper sends the body from a task of its own: the body
                // itself marks each piece it hands over. Watched, each piece
                // gets the whole `timeout`, the first counted, as `left` is,
                // from when this request started to wait.
                let (request, timeout, progress) = if wait.watches(request.body()) {
                    let start = waited.unwrap_or_else(Instant::now);
                    let progress = Arc::new(Progress::since(start));
                    let marked = progress.clone();
                    let request = request.map(|body| Marking::new(body, marked).boxed_unsync());
                    (request, self.timeout, Some(progress))
                } else {
                    (request, left, None)
                };
                let head = request.method() == Method::HEAD;
                let connections = http2.connections();
                let before = connections.before();
                let handed = http2::Handed::default();
                let sent = http2.send(request, &place, &handed, handover);
                match within(timeout, progress.as_deref(), sent).await {
                    // Still waiting for the first connection (one slower to
                    // open than `timeout`): nothing went out, as when an
                    // HTTP/1 connect takes the whole timeout.
                    Err(_) if connections.never_connected_since(&before) => {
                        Err(UpstreamError::NotSent(Cause::NoConnectionInTime))
                    }
                    Err(_) => {
                        http2.timed_out(&handed);
                        Err(UpstreamError::Timeout)
                    }
                    Ok(Ok(mut response)) => {
                        strip_answer_hop_by_hop(response.headers_mut());
                        // A 204 has no length to give (RFC 9110 §8.6): h2
                        // lets one through, but an HTTP/2 client such as
                        // curl's resets the stream it comes on, and a stored
                        // answer is replayed to any client. As an HTTP/1
                        // upstream's is (`response_head::settle_length`).
                        if response.status() == StatusCode::NO_CONTENT {
                            response.headers_mut().remove(header::CONTENT_LENGTH);
                        }
                        // `transfer_encoding` and the like: legal names in
                        // HTTP/2, a second framing to a peer in front of the
                        // gateway that folds `_` into `-` (docs/http1.md).
                        fields::remove_where(response.headers_mut(), framing::framing_look_alike);
                        let bodiless = head
                            || matches!(
                                response.status(),
                                StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
                            );
                        Ok(response
                            .map(|body| UpstreamBody::http2(body, bodiless, self.timeout, place)))
                    }
                    Ok(Err(err)) => Err(err),
                }
            }
        }
    }
}

/// Every configured upstream by name.
#[derive(Debug, Default)]
pub struct Upstreams(HashMap<String, Arc<Upstream>>);

impl Upstreams {
    /// For a reload: each upstream keeps the connections `running` has to
    /// it when the settings they were made by are unchanged
    /// ([`Upstream::renewed`]); the others start afresh, and the old ones
    /// close once the requests still using them are done.
    pub fn renewed(config: &Config, running: &Upstreams) -> Result<Self, UpstreamSetupError> {
        let mut upstreams = HashMap::new();
        for (name, upstream) in &config.upstreams {
            let renewed = Upstream::renewed(upstream, running.get(name).map(Arc::as_ref))?;
            upstreams.insert(name.clone(), Arc::new(renewed));
        }
        Ok(Self(upstreams))
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.0.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log names the address dialed, the scheme's port included when
    /// the url leaves it out.
    #[test]
    fn the_address_dialed_has_a_port() {
        for (url, dialed) in [
            ("http://127.0.0.1:3000", "127.0.0.1:3000"),
            ("http://api.internal", "api.internal:80"),
            ("https://api.internal/v1", "api.internal:443"),
            ("https://[::1]", "[::1]:443"),
            ("http://[2001:db8::2]:8080", "[2001:db8::2]:8080"),
        ] {
            let uri: Uri = url.parse().unwrap();
            let scheme = uri.scheme().unwrap();
            assert_eq!(address(scheme, uri.authority().unwrap()), dialed, "{url}");
        }
    }
}

//! Several regions, each with its own gateways and store: every keyed
//! request has a home region (`home`), is forwarded there whole when it
//! lands elsewhere (`forward`), and a request a region's gateway forwarded
//! is told from a client's by the shared token (`headers`); a forward that
//! comes back to a gateway it passed through is refused (`via`).
//! See docs/multi-region.md.

mod error;
mod forward;
mod headers;
mod home;
pub mod key_home;
mod via;

use std::sync::Arc;

use http::HeaderValue;

use crate::config::{Config, RegionPeerConfig, RegionsConfig, UpstreamConfig, UpstreamTlsConfig};
use crate::metrics::Metrics;
use crate::proxy::{Upstream, UpstreamSetupError};
use crate::store::RecordId;
use crate::tls::TlsError;

pub use error::RegionsError;
pub use forward::forward;
pub use headers::{FORWARDED_FROM, REGION_TOKEN, admit};
pub use home::home;
pub use key_home::{KeyHome, Whereabouts, key_home, key_home_in};

/// Fields a forward may add to a client's head: the two region headers,
/// `X-Forwarded-For`, `-Proto` and `-Host`, `X-Request-Id`, `Via`, and
/// `Host` made from an HTTP/2 `:authority`; an HTTP/2 client's request
/// without any of them gets all eight. The home region admits
/// them beyond `max_headers`: a request within the limits where it landed
/// is not refused at its home for what the hop added.
pub const HOP_FIELDS: usize = 8;

/// The regions of one loaded config: built with the runtime, swapped with it.
pub struct Regions {
    this: Arc<str>,
    token: String,
    /// `Idempotency-Region-Token` and `Idempotency-Forwarded-From` as sent.
    token_value: HeaderValue,
    from_value: HeaderValue,
    /// This gateway's `Via` pseudonym (`via::pseudonym`).
    via: String,
    /// Sorted by name; `names[i]` is `peers[i]`'s.
    names: Vec<Arc<str>>,
    peers: Vec<Peer>,
}

/// Another region's gateways, reached as an upstream is; `None` for this one.
pub struct Peer {
    pub name: Arc<str>,
    pub gateway: Option<Arc<Upstream>>,
}

/// A keyed request's home when it is another region's.
pub struct Home<'a> {
    pub regions: &'a Regions,
    pub name: &'a Arc<str>,
    pub gateway: &'a Arc<Upstream>,
}

/// What a request carries of the regions: set when the config has regions.
#[derive(Clone)]
pub struct Hop {
    pub regions: Arc<Regions>,
    /// It came from another region's gateway with the valid token: handled
    /// here, never forwarded again.
    pub landed: bool,
}

impl Hop {
    /// Where the record lives when it is not here; `None` to handle it here.
    pub fn elsewhere(&self, id: &RecordId) -> Option<Home<'_>> {
        if self.landed {
            return None;
        }
        self.regions.home_elsewhere(id)
    }
}

impl Regions {
    /// `None` when the config has no `[region]`. `running`: the regions of
    /// the config a reload replaces, whose connections to a region's
    /// gateways it leaves as they were are kept ([`Upstream::renewed`]), so
    /// forwards after the reload reuse them instead of dialing again beside
    /// those still in use.
    pub fn new(config: &Config, running: Option<&Regions>) -> Result<Option<Self>, RegionsError> {
        config
            .region
            .as_ref()
            .map(|region| Self::renewed(region, running))
            .transpose()
    }

    pub fn from_config(region: &RegionsConfig) -> Result<Self, RegionsError> {
        Self::renewed(region, None)
    }

    fn renewed(region: &RegionsConfig, running: Option<&Regions>) -> Result<Self, RegionsError> {
        let token_value =
            HeaderValue::from_str(&region.token).map_err(|source| RegionsError::Token {
                token_env: region.token_env.clone(),
                source,
            })?;
        let from_value =
            HeaderValue::from_str(&region.name).map_err(|source| RegionsError::Name {
                name: region.name.clone(),
                source,
            })?;
        let mut peers = Vec::new();
        for (name, peer) in &region.peers {
            let gateway = if *name == region.name {
                None
            } else {
                let kept = running.and_then(|running| running.gateway(name));
                let upstream = Upstream::renewed(&as_upstream(peer), kept);
                let upstream = upstream.map_err(|error| match error {
                    UpstreamSetupError::Tls(tls) => {
                        RegionsError::Peer(UpstreamSetupError::Tls(named(peer, tls)))
                    }
                    other => RegionsError::Peer(other),
                })?;
                Some(Arc::new(upstream))
            };
            peers.push(Peer {
                name: Arc::from(name.as_str()),
                gateway,
            });
        }
        Ok(Self {
            this: Arc::from(region.name.as_str()),
            token: region.token.clone(),
            token_value,
            from_value,
            via: via::pseudonym(&region.token, &region.name),
            names: peers.iter().map(|peer| peer.name.clone()).collect(),
            peers,
        })
    }

    /// Region `name`'s gateways as reached from here; `None` for this
    /// region and an unknown one.
    fn gateway(&self, name: &str) -> Option<&Upstream> {
        let at = self.names.iter().position(|known| &**known == name)?;
        self.peers[at].gateway.as_deref()
    }

    /// This gateway's region.
    pub fn this(&self) -> &Arc<str> {
        &self.this
    }

    pub fn home_elsewhere(&self, id: &RecordId) -> Option<Home<'_>> {
        let at = home(&self.names, &id.route, &id.scope, &id.key)?;
        let peer = &self.peers[at];
        Some(Home {
            regions: self,
            name: &peer.name,
            gateway: peer.gateway.as_ref()?,
        })
    }

    /// Makes every other region's `idemgate_region_forwards_total` series
    /// read 0 before its first forward, so an alert on `increase()` fires on
    /// the first one.
    pub fn announce(&self, metrics: &Metrics) {
        for peer in self.peers.iter().filter(|peer| peer.gateway.is_some()) {
            for result in forward::RESULTS {
                metrics
                    .region_forwards
                    .with_label_values(&[&*peer.name, result]);
            }
        }
    }
}

/// Every region's `ca` read as `serve` reads it, for `check`.
pub fn tls_errors(config: &Config) -> Vec<TlsError> {
    let Some(region) = &config.region else {
        return Vec::new();
    };
    region
        .peers
        .values()
        .filter(|peer| peer.name != region.name)
        .filter_map(|peer| {
            let upstream = as_upstream(peer);
            crate::tls::client_config(&upstream.name, upstream.tls.as_ref())
                .err()
                .map(|error| named(peer, error))
        })
        .collect()
}

/// The upstream client names a region's CA as an upstream's; the operator
/// wrote it as `regions.NAME.ca`.
fn named(peer: &RegionPeerConfig, mut error: TlsError) -> TlsError {
    if error.field == format!("upstreams.regions.{}.tls.ca", peer.name) {
        error.field = format!("regions.{}.ca", peer.name);
    }
    error
}

/// Most HTTP/1 connections open to one region's gateways from this process,
/// as for an upstream by default.
const CONNECTIONS: usize = 256;

/// Most connections this process opens to other regions' gateways at once
/// (for the open-files estimate at start).
pub fn forward_connections(config: &Config) -> usize {
    config.region.as_ref().map_or(0, |regions| {
        regions.peers.len().saturating_sub(1) * CONNECTIONS
    })
}

/// A region's gateways as the upstream client reaches them.
fn as_upstream(peer: &RegionPeerConfig) -> UpstreamConfig {
    UpstreamConfig {
        name: format!("regions.{}", peer.name),
        url: peer.gateway.clone(),
        connect_timeout: peer.connect_timeout,
        timeout: peer.timeout,
        http2: peer.http2,
        keep_alive: true,
        max_connections: CONNECTIONS,
        tls: peer.ca.as_ref().map(|ca| UpstreamTlsConfig {
            ca: Some(ca.clone()),
            cert: None,
            key: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn each_other_region_counts_its_pool_of_connections() {
        let env = |name: &str| (name == "TOKEN").then(|| "0123456789abcdef0123".to_owned());
        let parse =
            |text: String| crate::config::parse(&text, Path::new("t.toml"), &env).expect("valid");
        let one = parse(crate::config::ONE_ROUTE.to_owned());
        assert_eq!(forward_connections(&one), 0);
        let three = parse(format!(
            "{}\n[region]\nname = \"eu\"\ntoken_env = \"TOKEN\"\n\
             [regions.eu]\ngateway = \"http://10.0.0.1:8080\"\n\
             [regions.us]\ngateway = \"http://10.0.0.2:8080\"\n\
             [regions.ap]\ngateway = \"http://10.0.0.3:8080\"\n",
            crate::config::ONE_ROUTE
        ));
        assert_eq!(forward_connections(&three), 2 * CONNECTIONS);
    }
}

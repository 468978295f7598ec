//! What the gateway serves by: everything derived from one loaded config
//! (routes bound to their upstreams and metric series, limits, regions),
//! swapped whole on reload.

use std::sync::Arc;

use http::Method;

use crate::config::Config;
use crate::metrics::RouteMeters;
use crate::proxy::{Upstream, Upstreams};
use crate::route::{Route, RouteTable};

use super::runtime_error::RuntimeError;

/// Everything derived from one loaded config. Swapped whole on reload; a
/// request holds the `Arc` it started with until it ends.
pub struct Runtime {
    pub config: Arc<Config>,
    routes: RouteTable,
    /// `routes` in the same order, each with its upstream and metric series;
    /// matching stays the table's (first match in file order), this only
    /// adds what serving a route needs.
    bound: Vec<Arc<BoundRoute>>,
    pub upstreams: Upstreams,
    pub max_header_bytes: u64,
    pub max_headers: usize,
    pub max_stored_response: u64,
    /// `[region]`: where keys live; `None` without it.
    pub regions: Option<Arc<crate::region::Regions>>,
}

/// A route with what serving it needs, resolved once per config rather than
/// per request: its upstream (not looked up by name) and its metric series.
pub struct BoundRoute {
    pub route: Arc<Route>,
    pub upstream: Arc<Upstream>,
    pub meters: RouteMeters,
}

impl Runtime {
    pub fn new(config: Arc<Config>) -> Result<Self, RuntimeError> {
        Self::build(config, None)
    }

    /// The runtime of a reloaded config: upstreams and other regions'
    /// gateways it leaves as they were keep `running`'s connections
    /// ([`Upstreams::renewed`], [`crate::region::Regions::new`]).
    pub fn renewed(config: Arc<Config>, running: &Runtime) -> Result<Self, RuntimeError> {
        Self::build(config, Some(running))
    }

    fn build(config: Arc<Config>, running: Option<&Runtime>) -> Result<Self, RuntimeError> {
        let routes = RouteTable::new(&config);
        let none = Upstreams::default();
        let running_upstreams = running.map_or(&none, |running| &running.upstreams);
        let upstreams =
            Upstreams::renewed(&config, running_upstreams).map_err(RuntimeError::Upstream)?;
        let bound = routes
            .iter()
            .map(|route| {
                // Validation guarantees the upstream exists; say so rather than panic.
                let upstream = upstreams.get(&route.upstream).ok_or_else(|| {
                    RuntimeError::UnknownUpstream {
                        route: route.name.clone(),
                        upstream: route.upstream.clone(),
                    }
                })?;
                Ok(Arc::new(BoundRoute {
                    route: route.clone(),
                    upstream: upstream.clone(),
                    meters: RouteMeters::new(&route.name, &route.upstream),
                }))
            })
            .collect::<Result<_, RuntimeError>>()?;
        let running_regions = running.and_then(|running| running.regions.as_deref());
        let regions = crate::region::Regions::new(&config, running_regions)
            .map_err(RuntimeError::Regions)?
            .map(Arc::new);
        Ok(Self {
            regions,
            routes,
            bound,
            upstreams,
            max_header_bytes: config.server.max_header_bytes,
            max_headers: config.server.max_headers,
            max_stored_response: config.server.max_stored_response,
            config,
        })
    }

    /// Every route's series made before its first request (`RouteMeters::announce`).
    pub fn announce_routes(&self, metrics: &crate::metrics::Metrics) {
        for bound in &self.bound {
            bound.meters.announce(metrics);
            if bound.route.webhook.is_some() {
                let outcome = crate::metrics::Outcome::InvalidSignature;
                bound.meters.announce_outcome(metrics, outcome);
            }
        }
        if let Some(regions) = &self.regions {
            regions.announce(metrics);
        }
        let retentions: Vec<(&str, std::time::Duration)> = self
            .bound
            .iter()
            .filter_map(|bound| Some((&*bound.route.name, bound.route.policy.as_ref()?.retention)))
            .collect();
        metrics.set_route_retentions(&retentions);
    }

    /// The first route (in file order) that takes this request.
    pub fn route(&self, method: &Method, path: &str) -> Option<&Arc<BoundRoute>> {
        self.bound.get(self.routes.position(method, path)?)
    }
}

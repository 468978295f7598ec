//! The routes of a config in file order, and how a request finds its own:
//! the first whose methods and path match (through `RouteIndex` when the
//! routes are many).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use http::Method;

use crate::config::{Config, RouteConfig, RouteMatch};
use crate::wire::percent_case::upper_escapes;

use super::RoutePolicy;
use super::index::RouteIndex;

/// A route as the request path uses it.
#[derive(Debug)]
pub struct Route {
    pub name: Arc<str>,
    pub upstream: String,
    pub preserve_host: bool,
    matcher: RouteMatch,
    /// `None` on a plain reverse-proxy route (`idempotency = false`).
    pub policy: Option<RoutePolicy>,
    /// Keyed executions running now, for `max_in_flight`. A reload builds new
    /// routes, so the count starts afresh there.
    pub executing: AtomicUsize,
    /// A webhook route's signature check, run on every request before anything else.
    pub webhook: Option<crate::webhook::Verifier>,
}

impl Route {
    fn new(config: &RouteConfig, max_request_body: u64) -> Self {
        Self {
            name: Arc::from(config.name.as_str()),
            upstream: config.upstream.clone(),
            preserve_host: config.preserve_host,
            matcher: config.matcher.clone(),
            policy: config
                .idempotency
                .then(|| RoutePolicy::new(&config.policy, max_request_body)),
            executing: AtomicUsize::new(0),
            webhook: (config.webhook.as_ref())
                .map(|webhook| crate::webhook::Verifier::new(webhook, max_request_body)),
        }
    }

    /// `path` as [`RouteTable::position`] passes it: the hex digits of its
    /// escapes upper-cased, as the config keeps the routes' own.
    pub(super) fn matches(&self, method: &Method, path: &str) -> bool {
        if let Some(methods) = &self.matcher.methods
            && !methods.contains(method)
        {
            return false;
        }
        if let Some(exact) = &self.matcher.path {
            return path == exact;
        }
        match &self.matcher.path_prefix {
            Some(prefix) => path.starts_with(prefix.as_str()),
            None => true,
        }
    }
}

/// Routes in file order; the first match wins.
#[derive(Debug)]
pub struct RouteTable {
    routes: Vec<Arc<Route>>,
    /// `None` when the routes are few enough to be tried in turn.
    index: Option<RouteIndex>,
}

impl RouteTable {
    pub fn new(config: &Config) -> Self {
        let routes = config
            .routes
            .iter()
            .map(|route| Arc::new(Route::new(route, config.server.max_request_body)))
            .collect();
        Self::of(routes)
    }

    pub(super) fn of(routes: Vec<Arc<Route>>) -> Self {
        let index = RouteIndex::worth_building(routes.iter().map(|route| &route.matcher));
        Self { routes, index }
    }

    pub fn find(&self, method: &Method, path: &str) -> Option<&Arc<Route>> {
        self.position(method, path).map(|at| &self.routes[at])
    }

    /// Where the first match stands in file order (the index into `iter`).
    /// Escapes match in either case (`%c3%a9` is `%C3%A9`); a path with no
    /// `%` costs one `memchr` more, no allocation.
    pub fn position(&self, method: &Method, path: &str) -> Option<usize> {
        let path = &*upper_escapes(path);
        let matches = |at: usize| self.routes[at].matches(method, path);
        match &self.index {
            Some(index) => index.first(path, matches),
            None => (0..self.routes.len()).find(|&at| matches(at)),
        }
    }

    /// Every route, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter()
    }
}

/// A route of `matcher` alone, for tests of matching.
#[cfg(test)]
pub(super) fn route(name: &str, matcher: RouteMatch) -> Route {
    Route {
        name: name.into(),
        upstream: "u".into(),
        preserve_host: true,
        matcher,
        policy: None,
        executing: AtomicUsize::new(0),
        webhook: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouteMatch;

    #[test]
    fn prefix_exact_and_methods() {
        let prefix = route(
            "r",
            RouteMatch {
                path_prefix: Some("/v1/charges".into()),
                ..Default::default()
            },
        );
        assert!(prefix.matches(&Method::POST, "/v1/charges"));
        assert!(prefix.matches(&Method::GET, "/v1/charges/ch_1"));
        assert!(!prefix.matches(&Method::POST, "/v1/refunds"));

        let exact = route(
            "r",
            RouteMatch {
                path: Some("/hook".into()),
                methods: Some(vec![Method::POST]),
                ..Default::default()
            },
        );
        assert!(exact.matches(&Method::POST, "/hook"));
        assert!(!exact.matches(&Method::POST, "/hook/x"));
        assert!(!exact.matches(&Method::GET, "/hook"));
    }
}

//! The one place test configs are written: a small builder that renders a
//! config file's TOML, so a field every config needs, or a new option, is
//! added here once instead of in each test file's text.
//!
//! `Config::new()` is `[server]` with `listen = "{listen}"` and
//! `admin_listen = "{admin}"`, and the embedded store at `"{db}"`;
//! `Upstream::api()` is `[upstreams.api]` at `"{upstream}"`. Those
//! placeholders are what `gateway::render` fills in, so a `Config` is a
//! template like any other (`GatewayProcess::start(&dir, &url, &config)`).
//! Keys keep the order they were set in; setting one again replaces its
//! value. `raw` writes a value verbatim: an inline table, an array of tables,
//! or a value the gateway must refuse.
//!
//! What stays literal TOML, because the text is what those tests are about:
//! - tests/cli.rs: errors that name the file, the line and the column of a
//!   field (`check`, `serve`), the config file found in order, warnings, and
//!   files that are not a whole config (`listen = "nowhere"` alone).
//! - `check_*` tests that assert the line or column an error names:
//!   keys_and_fingerprints.rs (`bad.toml:6:58`), data_protection.rs
//!   (`:13:`, the line of `keys_env`).
//! - tests/tls_hops.rs `migrate`: a file with no `[server]` at all, which
//!   `idemgate migrate` must accept.
//! - idempotency.rs `headers_excluded_by_a_reload_*` adds one line to the
//!   running file under the route's `match`: the edit is what it reloads.
//!
//! tests/retention_store.rs has no gateway config.

mod sections;
mod value;

pub use sections::{Peer, Route, Store, Tls, Upstream};
pub use value::{Table, Value, raw};

/// A whole config file.
#[derive(Clone, Debug)]
pub struct Config {
    server: Table,
    server_tls: Option<Tls>,
    admin: Table,
    admin_tls: Option<Tls>,
    store: Store,
    upstreams: Vec<Upstream>,
    defaults: Table,
    routes: Vec<Route>,
    region: Table,
    peers: Vec<Peer>,
}

impl Default for Config {
    fn default() -> Config {
        Config::new()
    }
}

impl Config {
    /// Listening on `{listen}` and `{admin}`, the embedded store at `{db}`;
    /// no upstream, no route.
    pub fn new() -> Config {
        let mut server = Table::default();
        server.set("listen", "{listen}");
        server.set("admin_listen", "{admin}");
        Config {
            server,
            server_tls: None,
            admin: Table::default(),
            admin_tls: None,
            store: Store::embedded(),
            upstreams: Vec::new(),
            defaults: Table::default(),
            routes: Vec::new(),
            region: Table::default(),
            peers: Vec::new(),
        }
    }

    /// Embedded store; `charges` keyed on /v1/charges, `rest` a plain
    /// reverse proxy for everything else; upstream `api` with
    /// `timeout = "1s"`, `lock_timeout = "5s"`, `shutdown_grace = "5s"`.
    pub fn charges_and_rest() -> Config {
        Config::new()
            .server("shutdown_grace", "5s")
            .upstream(Upstream::api().timeout("1s"))
            .defaults("lock_timeout", "5s")
            .route(Route::api("charges", "/v1/charges"))
            .route(Route::api("rest", "/").plain())
    }

    /// A line of `[server]`.
    pub fn server(mut self, key: &str, value: impl Into<Value>) -> Config {
        self.server.set(key, value);
        self
    }

    pub fn server_tls(mut self, tls: Tls) -> Config {
        self.server_tls = Some(tls);
        self
    }

    /// A line of `[admin]`.
    pub fn admin(mut self, key: &str, value: impl Into<Value>) -> Config {
        self.admin.set(key, value);
        self
    }

    /// `/admin/*` guarded by the token in the variable `var`.
    pub fn admin_token_env(self, var: &str) -> Config {
        self.admin("token_env", var)
    }

    pub fn admin_tls(mut self, tls: Tls) -> Config {
        self.admin_tls = Some(tls);
        self
    }

    pub fn store(mut self, store: Store) -> Config {
        self.store = store;
        self
    }

    /// Changes the store in place: `.with_store(|s| s.set("pool_size", 4))`.
    pub fn with_store(mut self, change: impl FnOnce(Store) -> Store) -> Config {
        self.store = change(self.store);
        self
    }

    /// Adds the upstream, or replaces the one of the same name in place.
    pub fn upstream(mut self, upstream: Upstream) -> Config {
        put(&mut self.upstreams, upstream);
        self
    }

    /// Changes the upstream `name` (which must exist).
    pub fn with_upstream(
        mut self,
        name: &str,
        change: impl FnOnce(Upstream) -> Upstream,
    ) -> Config {
        edit(&mut self.upstreams, name, change);
        self
    }

    /// A line of `[defaults]`.
    pub fn defaults(mut self, key: &str, value: impl Into<Value>) -> Config {
        self.defaults.set(key, value);
        self
    }

    /// Adds the route last, or replaces the one of the same name in place.
    pub fn route(mut self, route: Route) -> Config {
        put(&mut self.routes, route);
        self
    }

    /// Changes the route `name` (which must exist) in place.
    pub fn with_route(mut self, name: &str, change: impl FnOnce(Route) -> Route) -> Config {
        edit(&mut self.routes, name, change);
        self
    }

    /// Renames the route `from` (its options stay).
    pub fn rename_route(self, from: &str, to: &str) -> Config {
        self.with_route(from, |mut route| {
            route.name = to.to_owned();
            route
        })
    }

    /// `[region]`: this gateway is region `name`; peers present the token
    /// in the variable `token_env`.
    pub fn region(mut self, name: &str, token_env: &str) -> Config {
        self.region.set("name", name);
        self.region.set("token_env", token_env);
        self
    }

    /// A `[regions.NAME]` table.
    pub fn peer(mut self, peer: Peer) -> Config {
        self.peers.push(peer);
        self
    }

    /// The file's text (placeholders left for `gateway::render`).
    pub fn toml(&self) -> String {
        let mut out = String::new();
        self.server.write("[server]", &mut out);
        if let Some(tls) = &self.server_tls {
            tls.0.write("[server.tls]", &mut out);
        }
        self.admin.write("[admin]", &mut out);
        if let Some(tls) = &self.admin_tls {
            tls.0.write("[admin.tls]", &mut out);
        }
        self.store.write(&mut out);
        for upstream in &self.upstreams {
            upstream.write(&mut out);
        }
        self.defaults.write("[defaults]", &mut out);
        for route in &self.routes {
            route.write(&mut out);
        }
        self.region.write("[region]", &mut out);
        for peer in &self.peers {
            peer.table
                .write(&format!("[regions.{}]", peer.name), &mut out);
        }
        out
    }
}

/// An upstream or a route: one of a list, found by its name.
trait Named: Clone {
    fn name(&self) -> &str;
}

impl Named for Upstream {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Route {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Replaces the item of `item`'s name in place, or adds it last.
fn put<T: Named>(items: &mut Vec<T>, item: T) {
    match items.iter_mut().find(|i| i.name() == item.name()) {
        Some(existing) => *existing = item,
        None => items.push(item),
    }
}

/// Changes the item `name`, which must be there.
fn edit<T: Named>(items: &mut [T], name: &str, change: impl FnOnce(T) -> T) {
    let at = (items.iter())
        .position(|i| i.name() == name)
        .unwrap_or_else(|| panic!("no {name} in the config"));
    items[at] = change(items[at].clone());
}

/// What `GatewayProcess` starts from: a `Config`, or a template's text.
pub trait Template {
    fn template(&self) -> String;
}

impl Template for Config {
    fn template(&self) -> String {
        self.toml()
    }
}

impl Template for str {
    fn template(&self) -> String {
        self.to_owned()
    }
}

impl Template for String {
    fn template(&self) -> String {
        self.clone()
    }
}

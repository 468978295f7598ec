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

use std::path::Path;

use super::certs::Identity;

/// A value as written after `key = `.
#[derive(Clone, Debug, PartialEq)]
pub struct Value(String);

/// A value written as is: `raw("{ path_prefix = \"/\" }")`.
pub fn raw(text: &str) -> Value {
    Value(text.to_owned())
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value(quoted(text))
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value(quoted(&text))
    }
}

impl From<&String> for Value {
    fn from(text: &String) -> Value {
        Value(quoted(text))
    }
}

impl From<&Path> for Value {
    fn from(path: &Path) -> Value {
        Value(quoted(&path.display().to_string()))
    }
}

impl From<&std::path::PathBuf> for Value {
    fn from(path: &std::path::PathBuf) -> Value {
        Value::from(path.as_path())
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Value {
        Value(value.to_string())
    }
}

macro_rules! integer_values {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(value: $t) -> Value {
                Value(value.to_string())
            }
        }
    )*};
}
integer_values!(i32, i64, u16, u32, u64, usize);

/// An array of strings.
impl From<&[&str]> for Value {
    fn from(items: &[&str]) -> Value {
        let items: Vec<String> = items.iter().map(|item| quoted(item)).collect();
        Value(format!("[{}]", items.join(", ")))
    }
}

impl<const N: usize> From<[&str; N]> for Value {
    fn from(items: [&str; N]) -> Value {
        Value::from(&items[..])
    }
}

/// The keys of one table, in the order they were first set.
#[derive(Clone, Debug, Default)]
pub struct Table(Vec<(String, Value)>);

impl Table {
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    pub fn unset(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A table of one key.
    fn of(key: &str, value: impl Into<Value>) -> Table {
        let mut table = Table::default();
        table.set(key, value);
        table
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `header` (`[name]` or `[[name]]`) and its lines; nothing for an
    /// empty `[name]` table.
    fn write(&self, header: &str, out: &mut String) {
        if self.is_empty() && !header.starts_with("[[") {
            return;
        }
        out.push('\n');
        out.push_str(header);
        out.push('\n');
        for (key, value) in &self.0 {
            out.push_str(&format!("{key} = {}\n", value.0));
        }
    }
}

/// `[server.tls]` or `[admin.tls]`.
#[derive(Clone, Debug)]
pub struct Tls(Table);

impl Tls {
    pub fn new(cert: &Path, key: &Path) -> Tls {
        let mut table = Table::of("cert", cert);
        table.set("key", key);
        Tls(table)
    }

    /// The identity's certificate and key.
    pub fn of(identity: &Identity) -> Tls {
        Tls::new(&identity.cert, &identity.key)
    }

    /// Client certificates signed by `ca` are asked for and required.
    pub fn client_ca(mut self, ca: &Path) -> Tls {
        self.0.set("client_ca", ca);
        self
    }
}

/// `[store]` with its `[store.redis]` and `[store.encryption]`.
#[derive(Clone, Debug)]
pub struct Store {
    table: Table,
    redis: Table,
    encryption: Table,
}

impl Store {
    /// The embedded store at `path`.
    pub fn embedded_at(path: impl Into<Value>) -> Store {
        Store::of(Table::of("path", path))
    }

    fn of(table: Table) -> Store {
        Store {
            table,
            redis: Table::default(),
            encryption: Table::default(),
        }
    }

    /// The embedded store in the test directory (`{db}`).
    pub fn embedded() -> Store {
        Store::embedded_at("{db}")
    }

    /// Postgres at `url` (a test's schema is in its URL: `TestSchema::url`).
    pub fn postgres(url: &str) -> Store {
        Store::of(Table::of("backend", "postgres")).set("url", url)
    }

    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Store {
        self.table.set(key, value);
        self
    }

    /// The Redis fast path at `url`, every key under `key_prefix`.
    pub fn redis(mut self, url: &str, key_prefix: &str) -> Store {
        self.redis.set("url", url);
        self.redis.set("key_prefix", key_prefix);
        self
    }

    pub fn redis_set(mut self, key: &str, value: impl Into<Value>) -> Store {
        self.redis.set(key, value);
        self
    }

    /// `[store.encryption] keys_env`: no table when `vars` is empty.
    pub fn encryption(mut self, vars: &[&str]) -> Store {
        self.encryption = Table::default();
        if !vars.is_empty() {
            self.encryption.set("keys_env", vars);
        }
        self
    }

    fn write(&self, out: &mut String) {
        self.table.write("[store]", out);
        self.redis.write("[store.redis]", out);
        self.encryption.write("[store.encryption]", out);
    }
}

/// `[upstreams.NAME]` and its `[upstreams.NAME.tls]`.
#[derive(Clone, Debug)]
pub struct Upstream {
    name: String,
    table: Table,
    tls: Table,
}

impl Upstream {
    pub fn new(name: &str, url: &str) -> Upstream {
        Upstream {
            name: name.to_owned(),
            table: Table::of("url", url),
            tls: Table::default(),
        }
    }

    /// `api` at the test's upstream (`{upstream}`).
    pub fn api() -> Upstream {
        Upstream::new("api", "{upstream}")
    }

    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Upstream {
        self.table.set(key, value);
        self
    }

    pub fn timeout(self, timeout: &str) -> Upstream {
        self.set("timeout", timeout)
    }

    /// A line of `[upstreams.NAME.tls]`.
    pub fn tls(mut self, key: &str, value: impl Into<Value>) -> Upstream {
        self.tls.set(key, value);
        self
    }

    fn write(&self, out: &mut String) {
        let header = format!("[upstreams.{}]", self.name);
        self.table.write(&header, out);
        self.tls
            .write(&format!("[upstreams.{}.tls]", self.name), out);
    }
}

/// One `[[routes]]`: its name, upstream and `match` first, then its options.
#[derive(Clone, Debug)]
pub struct Route {
    name: String,
    upstream: String,
    matcher: Table,
    options: Table,
}

impl Route {
    /// A route on `upstream` matching every path (narrow it with
    /// `path_prefix`, `path` or `methods`).
    pub fn new(name: &str, upstream: &str) -> Route {
        Route {
            name: name.to_owned(),
            upstream: upstream.to_owned(),
            matcher: Table::default(),
            options: Table::default(),
        }
    }

    /// `NAME` on upstream `api`, under `path_prefix`.
    pub fn api(name: &str, path_prefix: &str) -> Route {
        Route::new(name, "api").path_prefix(path_prefix)
    }

    pub fn path_prefix(mut self, prefix: &str) -> Route {
        self.matcher.set("path_prefix", prefix);
        self
    }

    pub fn path(mut self, path: &str) -> Route {
        self.matcher.set("path", path);
        self
    }

    pub fn methods(mut self, methods: &[&str]) -> Route {
        self.matcher.set("methods", methods);
        self
    }

    /// A plain reverse-proxy route (`idempotency = false`).
    pub fn plain(self) -> Route {
        self.set("idempotency", false)
    }

    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Route {
        self.options.set(key, value);
        self
    }

    pub fn unset(mut self, key: &str) -> Route {
        self.options.unset(key);
        self
    }

    fn write(&self, out: &mut String) {
        let mut table = Table::default();
        table.set("name", self.name.as_str());
        table.set("upstream", self.upstream.as_str());
        if self.matcher.is_empty() {
            table.set("match", raw("{ path_prefix = \"/\" }"));
        } else {
            let parts: Vec<String> = (self.matcher.0.iter())
                .map(|(key, value)| format!("{key} = {}", value.0))
                .collect();
            table.set("match", raw(&format!("{{ {} }}", parts.join(", "))));
        }
        table.0.extend(self.options.0.iter().cloned());
        table.write("[[routes]]", out);
    }
}

/// `[regions.NAME]`: a region's gateway as the others reach it.
#[derive(Clone, Debug)]
pub struct Peer {
    name: String,
    table: Table,
}

impl Peer {
    pub fn new(name: &str, gateway: &str) -> Peer {
        Peer {
            name: name.to_owned(),
            table: Table::of("gateway", gateway),
        }
    }

    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Peer {
        self.table.set(key, value);
        self
    }
}

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

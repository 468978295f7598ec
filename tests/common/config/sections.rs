//! The parts of a config file: `[server.tls]`/`[admin.tls]`, `[store]`,
//! `[upstreams.NAME]`, `[[routes]]` and `[regions.NAME]`.

use std::path::Path;

use super::value::{Table, Value, raw};
use crate::common::certs::Identity;

/// `[server.tls]` or `[admin.tls]`.
#[derive(Clone, Debug)]
pub struct Tls(pub(super) Table);

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

    pub(super) fn write(&self, out: &mut String) {
        self.table.write("[store]", out);
        self.redis.write("[store.redis]", out);
        self.encryption.write("[store.encryption]", out);
    }
}

/// `[upstreams.NAME]` and its `[upstreams.NAME.tls]`.
#[derive(Clone, Debug)]
pub struct Upstream {
    pub(super) name: String,
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

    pub(super) fn write(&self, out: &mut String) {
        let header = format!("[upstreams.{}]", self.name);
        self.table.write(&header, out);
        self.tls
            .write(&format!("[upstreams.{}.tls]", self.name), out);
    }
}

/// One `[[routes]]`: its name, upstream and `match` first, then its options.
#[derive(Clone, Debug)]
pub struct Route {
    pub(super) name: String,
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

    pub(super) fn write(&self, out: &mut String) {
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
    pub(super) name: String,
    pub(super) table: Table,
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

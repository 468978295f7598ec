//! The resolved configuration: what the rest of the gateway reads.
//!
//! Everything here is already validated, parsed and defaulted; no field needs a
//! second check downstream. It knows nothing of hyper or of the store: header
//! names are `http::HeaderName`, methods `http::Method` (the `http` crate's
//! vocabulary types), durations `std::time::Duration`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::admin_token::{AdminToken, TokenSource};

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this configuration was read from (for messages and reload).
    pub source: PathBuf,
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub store: StoreConfig,
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// In file order: the first route that matches a request wins.
    pub routes: Vec<RouteConfig>,
    /// Non-fatal findings (a route shadowed by an earlier one, ...), for `check` and the log.
    pub warnings: Vec<String>,
    /// `[region]` and `[regions.*]`; `None` (no `[region]`): one region, and
    /// nothing is forwarded.
    pub region: Option<RegionsConfig>,
    /// Where the file writes the settings that name files and URLs
    /// (`Config::error_at`).
    pub places: super::Places,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub max_request_body: u64,
    pub max_stored_response: u64,
    /// Most bytes of request bodies read whole and of keyed answers not yet
    /// taken by their clients held at once, every request together (past
    /// it: 503 `gateway-overloaded`).
    pub max_buffered_bodies: u64,
    pub max_header_bytes: u64,
    pub header_read_timeout: Duration,
    /// Longest a body read whole (keyed, key in the body, webhook, a small
    /// pass-through's) may take from its head to its end (past it: 408).
    pub body_read_timeout: Duration,
    pub max_connections: usize,
    /// Most header fields one request may carry (more: 431).
    pub max_headers: usize,
    pub shutdown_grace: Duration,
    pub tls: Option<TlsConfig>,
    /// `problem_base`: every problem's `type` is this + its code, and the
    /// answer links it as `describedby`. `None`: `type` is the code.
    pub problem_base: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// The variables `admin.token_env` lists, in order (one when a single
    /// name is written); empty when the token is inline or not configured.
    pub token_env: Vec<String>,
    /// The tokens `/admin/*` accepts, any one of them: the inline `token`,
    /// or the value (read at load time) of each listed variable that holds
    /// one. Empty: `/admin/*` is disabled.
    pub tokens: Vec<AdminToken>,
    /// `[admin.tls]`: the admin plane over TLS (bearer token included),
    /// optionally with client certificates; `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
}

impl AdminConfig {
    /// The listed variables that hold no token (unset, empty or blank):
    /// during a rotation, the one not exported yet or already removed.
    pub fn variables_without_token(&self) -> Vec<&str> {
        (self.token_env.iter())
            .filter(|name| {
                !(self.tokens.iter())
                    .any(|token| matches!(&token.source, TokenSource::Env(env) if env == *name))
            })
            .map(String::as_str)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    Embedded(EmbeddedStoreConfig),
    Postgres(PostgresStoreConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedStoreConfig {
    pub path: PathBuf,
    /// What an acknowledged answer survives.
    pub durability: Durability,
    /// How often expired records are deleted in the background.
    pub sweep_interval: Duration,
    /// At most this many records are deleted per sweep batch.
    pub sweep_batch: u32,
    /// `[store.encryption]`: the first key seals answers, every one opens
    /// them; empty: answers are stored clear.
    pub encryption: Vec<super::StoreKey>,
}

/// What an answer of the embedded store survives once it is acknowledged
/// (`store.durability`). Either way the file stays consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Synced to the disk first (`fdatasync`): survives a power loss or a
    /// kernel panic too.
    #[default]
    PowerLoss,
    /// Handed to the operating system first and synced within 20 ms after:
    /// survives the gateway's own crash; a power loss or kernel panic can
    /// lose the answers of those last 20 ms.
    ProcessCrash,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PostgresStoreConfig {
    /// Resolved connection URL (from `url` or `url_env`). A secret: never log it.
    pub url: String,
    pub pool_size: usize,
    pub connect_timeout: Duration,
    pub statement_timeout: Duration,
    /// Apply migrations at `serve` start.
    pub migrate: bool,
    pub sweep_interval: Duration,
    pub sweep_batch: u32,
    pub redis: Option<RedisConfig>,
    /// `[store.encryption]`, as for the embedded store.
    pub encryption: Vec<super::StoreKey>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// Resolved URL (from `url` or `url_env`). A secret: never log it.
    pub url: String,
    /// Prefix of every key idemgate writes, so one Redis can serve several gateways.
    pub key_prefix: String,
    /// `[store.redis] ca`: a CA bundle (PEM) trusted for `rediss://` instead
    /// of the platform's roots.
    pub ca: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    pub name: String,
    /// As written, e.g. `http://127.0.0.1:3000` (scheme http or https).
    pub url: String,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// Speak HTTP/2 to this upstream (prior knowledge over http, ALPN over https).
    pub http2: bool,
    /// HTTP/1: reuse a connection for the next request (`false`: one
    /// request per connection, `Connection: close`).
    pub keep_alive: bool,
    /// Most HTTP/1 connections open to this upstream at once (per gateway
    /// process); more concurrent requests wait up to `connect_timeout`.
    pub max_connections: usize,
    pub tls: Option<UpstreamTlsConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTlsConfig {
    /// Extra CA bundle (PEM) trusted for this upstream, in addition to the platform roots.
    pub ca: Option<PathBuf>,
    /// Client certificate chain and key (PEM) presented to the upstream.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    pub name: String,
    pub upstream: String,
    pub matcher: RouteMatch,
    /// `false`: a plain reverse-proxy route; `policy` is then not acted on.
    pub idempotency: bool,
    /// Keep the client's `Host` header (default) or send the upstream's authority.
    pub preserve_host: bool,
    pub policy: Policy,
    /// A webhook sender's signature, checked on every request of the route
    /// before anything else (`webhook = { ... }`).
    pub webhook: Option<super::WebhookConfig>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteMatch {
    /// Exact path.
    pub path: Option<String>,
    /// Path prefix, a plain string prefix (`/v1/charges` matches
    /// `/v1/charges`, `/v1/charges/ch_1` and also `/v1/chargesX`).
    pub path_prefix: Option<String>,
    /// `None` = any method.
    pub methods: Option<Vec<Method>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The methods the idempotency rules apply to; others pass through.
    pub methods: Vec<Method>,
    /// Tried in order; the first that yields a key wins. Never empty.
    pub key: Vec<KeySource>,
    pub required: bool,
    pub retention: Duration,
    pub lock_timeout: Duration,
    pub on_in_flight: InFlightMode,
    pub wait_timeout: Duration,
    pub scope: Vec<ScopePart>,
    pub fingerprint: Vec<FingerprintPart>,
    pub canonical_json: bool,
    pub release_statuses: Vec<u16>,
    pub forward_key: bool,
    /// The true/false replay marker header.
    pub replay_header: ReplayHeader,
    /// Header names never stored nor replayed.
    pub replay_exclude_headers: Vec<HeaderName>,
    pub on_store_error: StoreErrorMode,
    /// Most keyed executions of the route running at once; past it a new key
    /// gets 503 + Retry-After and is freed. 0: no limit.
    pub max_in_flight: usize,
    /// The form every key a client sends must have (`None`: any).
    pub key_pattern: Option<KeyPattern>,
    pub fingerprint_body: FingerprintBody,
    /// Form bodies compare by their decoded fields, sorted by name.
    pub canonical_form: bool,
    /// Classes of upstream statuses that free the key, beside `release_statuses`.
    pub release_classes: Vec<StatusClass>,
    /// Carries the record's expiry (an HTTP-date) on answers under a key.
    pub expiry_header: Option<HeaderName>,
    /// Non-empty: only these answer headers are stored and replayed
    /// (`Content-Type` and `Content-Encoding` always are).
    pub replay_headers: Vec<HeaderName>,
    /// The marker's values on a fresh and on a replayed answer.
    pub replay_values: ReplayValues,
}

impl Policy {
    /// Whether an upstream answer of this status frees the key
    /// (`release_statuses`: codes, and the classes "4xx" / "5xx").
    pub fn releases(&self, status: u16) -> bool {
        self.release_statuses.contains(&status)
            || self
                .release_classes
                .iter()
                .any(|class| class.contains(status))
    }

    /// Whether the idempotency rules apply to a request of this method.
    pub fn applies_to(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }
}

pub use crate::key::{FingerprintBody, FingerprintPart, KeyPattern, KeySource};
use http::{HeaderName, HeaderValue, Method};

/// `replay_header`: the marker's field name, and its spelling in the file,
/// which `check` and `/admin/routes` show (answers carry the name in lower
/// case, as every field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayHeader {
    name: HeaderName,
    written: String,
}

impl ReplayHeader {
    /// `name` is `written`, parsed.
    pub(super) fn new(name: HeaderName, written: &str) -> Self {
        Self {
            name,
            written: written.to_owned(),
        }
    }

    pub fn name(&self) -> &HeaderName {
        &self.name
    }

    pub fn as_written(&self) -> &str {
        &self.written
    }
}

/// A class of HTTP statuses in `release_statuses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// `"4xx"`
    ClientError,
    /// `"5xx"`
    ServerError,
}

impl StatusClass {
    pub fn contains(self, status: u16) -> bool {
        match self {
            StatusClass::ClientError => (400..500).contains(&status),
            // 600-999 are invalid, and a client reads them as a 5xx
            // (RFC 9110 §15): an upstream's library error, say.
            StatusClass::ServerError => (500..1000).contains(&status),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

/// `replay_values = [fresh, replayed]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayValues {
    pub fresh: HeaderValue,
    pub replayed: HeaderValue,
}

impl Default for ReplayValues {
    fn default() -> Self {
        Self {
            fresh: HeaderValue::from_static("false"),
            replayed: HeaderValue::from_static("true"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightMode {
    Conflict,
    Wait,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorMode {
    Reject,
    Pass,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopePart {
    /// `header:Authorization`
    Header(HeaderName),
    /// The subject of the verified TLS client certificate (`client_cert`).
    ClientCert,
}

/// As the file writes it, the name in lower case (`header:authorization`):
/// also the part's label in every record's scope hash, so a change would
/// part every stored key from its retries.
impl std::fmt::Display for ScopePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScopePart::Header(name) => write!(f, "header:{name}"),
            ScopePart::ClientCert => f.write_str("client_cert"),
        }
    }
}

/// Several regions, each with its own gateways and store: every key has a
/// home region (docs/multi-region.md).
#[derive(Debug, Clone, PartialEq)]
pub struct RegionsConfig {
    /// This gateway's region; one of `peers`.
    pub name: String,
    /// Name of the variable the token was read from, as configured.
    pub token_env: String,
    /// The shared secret gateways of other regions present. Never log it.
    pub token: String,
    /// Every region, this one included, by name.
    pub peers: BTreeMap<String, RegionPeerConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegionPeerConfig {
    pub name: String,
    /// The region's gateway URL as written (http or https).
    pub gateway: String,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// Extra CA bundle (PEM) trusted for this region's gateway.
    pub ca: Option<PathBuf>,
    /// Speak HTTP/2 to it (prior knowledge over http, ALPN over https).
    pub http2: bool,
}

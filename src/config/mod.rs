//! Configuration: `file` (the TOML as written, serde + spans) → `validate`
//! (defaults, inheritance, cross-field rules; every error collected) → `model`
//! (the resolved [`Config`] the gateway reads).
//!
//! Nothing in here knows of hyper or of the store.

mod admin_token;
mod describe;
mod error;
#[cfg(test)]
pub(crate) mod every_policy_field;
mod field_path;
mod file;
mod file_keys;
mod model;
mod path_index;
mod places;
mod quoted;
mod store_key;
mod units;
mod validate;
mod webhook;

pub use admin_token::{AdminToken, TokenSource};
pub use error::{ConfigError, ConfigErrors};
pub(crate) use field_path::field_path;
pub use model::*;
pub use path_index::PathIndex;
pub use places::Places;
pub(crate) use quoted::quoted;
pub use quoted::{is_long, shortened, shown_path};
pub use store_key::StoreKey;
pub use validate::NAME_MAX_BYTES;
pub use webhook::{DEFAULT_TOLERANCE, WebhookConfig, WebhookScheme, WebhookSecret};

use std::path::Path;

/// The smallest valid file, for tests: one upstream, one route of every path.
#[cfg(test)]
pub(crate) const ONE_ROUTE: &str = r#"
[upstreams.api]
url = "http://127.0.0.1:3000"

[[routes]]
name = "all"
upstream = "api"
match = { path_prefix = "/" }
"#;

/// Reads and validates the file at `path`, resolving `*_env` secrets from the
/// process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = read(path)?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// What the one-shot store commands (`migrate`, `sweep`, `keys`) read of a
/// config file: the store, the routes' names and scopes, and the regions
/// (which region's store this is, and where a key's records are kept
/// otherwise). The file is validated
/// whole, but the data plane's secrets (webhook signing secrets, the region
/// token, the keys of `[store.encryption]`) are not read: a migration job or
/// an operator's shell need not hold them; none of these commands seals or
/// opens a stored answer. No [`Config`] leaves here, so nothing serves without them.
#[derive(Debug)]
pub struct StoreSettings {
    pub store: StoreConfig,
    pub routes: Vec<RouteScope>,
    /// `[region]` and `[regions.*]`, the token left unread (empty).
    pub region: Option<RegionsConfig>,
    /// The file read, and where it writes the store's settings: a URL or
    /// path that cannot be used is located as `check` locates it.
    pub source: std::path::PathBuf,
    pub places: Places,
}

/// A route's name and the parts of its scope: what a key's home region
/// depends on besides the key.
#[derive(Debug)]
pub struct RouteScope {
    pub name: String,
    pub scope: Vec<ScopePart>,
}

impl StoreSettings {
    /// The scope parts of the route named `route`; `None` when the file
    /// has no such route.
    pub fn scope_of(&self, route: &str) -> Option<&[ScopePart]> {
        (self.routes.iter())
            .find(|candidate| candidate.name == route)
            .map(|found| found.scope.as_slice())
    }
}

pub fn load_store_settings(path: &Path) -> Result<StoreSettings, ConfigErrors> {
    let text = read(path)?;
    let env = |name: &str| std::env::var(name).ok();
    let config = validate::parse(&text, path, &env, validate::Secrets::Skip)?;
    Ok(StoreSettings {
        store: config.store,
        routes: (config.routes.into_iter())
            .map(|route| RouteScope {
                name: route.name,
                scope: route.policy.scope,
            })
            .collect(),
        region: config.region,
        source: config.source,
        places: config.places,
    })
}

/// Far above any real config (a large one is tens of KiB): a file past it
/// is something else given by mistake, and a device such as `/dev/zero`
/// would otherwise be read until memory runs out.
const MAX_FILE_BYTES: u64 = 16 << 20;

fn read(path: &Path) -> Result<String, ConfigErrors> {
    use std::io::Read;
    let unreadable = |message: String| {
        ConfigErrors::single(ConfigError {
            file: path.to_path_buf(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read the file: {message}"),
        })
    };
    // Read through `take`, not by the size the file claims: a pipe
    // (`-c <(envsubst < template)`) has none, a device may claim 0.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| std::io::Read::take(file, MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|err| unreadable(err.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(unreadable(format!(
            "larger than {} MiB: not a configuration file",
            MAX_FILE_BYTES >> 20
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| unreadable("not valid UTF-8 (a TOML file is UTF-8 text)".to_owned()))
}

/// Validates `text` as if read from `source`, resolving `*_env` secrets with `env`.
pub fn parse(
    text: &str,
    source: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    validate::parse(text, source, env, validate::Secrets::Read)
}

/// The human-readable summary `idemgate check` prints: one block per route with
/// its match, upstream and effective policy, then the warnings.
pub fn describe(config: &Config) -> String {
    describe::describe(config)
}

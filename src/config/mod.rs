//! Configuration: `file` (the TOML as written, serde + spans) → `validate`
//! (defaults, inheritance, cross-field rules; every error collected) → `model`
//! (the resolved [`Config`] the gateway reads).
//!
//! Nothing in here knows of hyper or of the store.

mod describe;
mod error;
#[cfg(test)]
pub(crate) mod every_policy_field;
mod file;
mod file_keys;
mod model;
mod places;
mod store_key;
mod units;
mod validate;
mod webhook;

pub use error::{ConfigError, ConfigErrors};
pub use model::*;
pub use places::Places;
pub use store_key::StoreKey;
pub use webhook::{DEFAULT_TOLERANCE, WebhookConfig, WebhookScheme, WebhookSecret};

use std::path::Path;

/// Reads and validates the file at `path`, resolving `*_env` secrets from the
/// process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        ConfigErrors::single(ConfigError {
            file: path.to_path_buf(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read the file: {err}"),
        })
    })?;
    parse(&text, path, &|name| std::env::var(name).ok())
}

/// Validates `text` as if read from `source`, resolving `*_env` secrets with `env`.
pub fn parse(
    text: &str,
    source: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    validate::parse(text, source, env)
}

/// The human-readable summary `idemgate check` prints: one block per route with
/// its match, upstream and effective policy, then the warnings.
pub fn describe(config: &Config) -> String {
    describe::describe(config)
}

//! What `serve` reads at start besides the file, read without starting
//! anything: the certificates, keys and CAs the file names (the listeners',
//! the upstreams', the regions') and the store's settings that need no
//! connection (its URLs, their TLS parameters, the CA files). Each problem
//! is located in the file as validation locates its own
//! (`FILE:LINE:COL: field: message`), never quoting a URL.
//!
//! `check`, `serve` (before it opens the store) and a reload read all of
//! it alike: what one refuses, the others refuse in the same words, so a
//! reloaded file is one the next start accepts. The store commands read its
//! store part ([`unusable_store`]).

use crate::config::{Config, ConfigError, StoreConfig, StoreSettings};
use crate::tls::TlsError;

/// Everything a config names outside the file: a file `check` calls ok
/// must not then fail to start, nor a reload take what a restart refuses.
pub fn unusable(config: &Config) -> Vec<ConfigError> {
    let mut errors = listener_errors(config);
    for upstream in config.upstreams.values() {
        if let Err(error) = crate::tls::client_config(&upstream.name, upstream.tls.as_ref()) {
            errors.push(tls_error(config, &error));
        }
    }
    for error in crate::region::tls_errors(config) {
        errors.push(tls_error(config, &error));
    }
    let error_at = |field: &str, message: String| config.error_at(field, message);
    errors.extend(store_errors(&config.store, &error_at));
    errors.extend(embedded_path_error(&config.store, &error_at));
    in_file_order(errors)
}

/// What [`unusable`] says of the store, for the store commands (`migrate`,
/// `sweep`, `compact`, `keys`): a URL or a path that cannot be used is a
/// problem of the file, said in `check`'s words, not a store that is down.
pub fn unusable_store(settings: &StoreSettings) -> Vec<ConfigError> {
    let error_at = |field: &str, message: String| settings.error_at(field, message);
    let mut errors = store_errors(&settings.store, &error_at);
    errors.extend(embedded_path_error(&settings.store, &error_at));
    in_file_order(errors)
}

/// Locates a problem with a setting in the file (`Config::error_at`).
type ErrorAt<'a> = dyn Fn(&str, String) -> ConfigError + 'a;

/// The embedded store's file as `serve` meets it when it opens (and, if
/// need be, creates) it and its directories: a path that is a directory,
/// or that runs through a file, can be neither. Looked at without creating
/// anything; what only trying can tell (permissions) is left to `serve`.
fn embedded_path_error(store: &StoreConfig, error_at: &ErrorAt) -> Option<ConfigError> {
    let StoreConfig::Embedded(embedded) = store else {
        return None;
    };
    let path = &embedded.path;
    let problem = if path.is_dir() {
        Some(format!(
            "{} is a directory, not a store file",
            path.display()
        ))
    } else if path.is_file() {
        (!crate::store::embedded::holds_a_database(path)).then(|| {
            format!(
                "{} is not a store file: it is not an SQLite database (another file given by \
                 mistake?)",
                path.display()
            )
        })
    } else if path.exists() {
        // `/dev/null`, a socket, a pipe: SQLite cannot keep a database there.
        Some(format!(
            "{} is not a regular file (a device, a socket or a pipe), not a store file",
            path.display()
        ))
    } else {
        // The nearest ancestor that exists must be a directory.
        path.ancestors()
            .skip(1)
            .filter(|dir| !dir.as_os_str().is_empty())
            .find_map(|dir| match std::fs::metadata(dir) {
                Ok(meta) => Some((!meta.is_dir()).then_some(dir)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => Some(None),
            })
            .flatten()
            .map(|file| {
                format!(
                    "{} cannot be created: {} is not a directory",
                    path.display(),
                    file.display()
                )
            })
    };
    problem.map(|message| error_at("store.path", message))
}

/// As validation orders its errors: as an operator fixes them.
fn in_file_order(mut errors: Vec<ConfigError>) -> Vec<ConfigError> {
    errors.sort_by_key(|error| (error.line, error.column));
    errors
}

/// `[server.tls]` and `[admin.tls]`: certificate, key and client CA read and
/// matched as the listener is built.
fn listener_errors(config: &Config) -> Vec<ConfigError> {
    let server = (config.server.tls.as_ref()).map(|tls| crate::tls::server_config(tls).err());
    let admin = (config.admin.tls.as_ref()).map(|tls| crate::tls::admin_config(tls).err());
    [server, admin]
        .into_iter()
        .flatten()
        .flatten()
        .map(|error| tls_error(config, &error))
        .collect()
}

/// The store's URLs and CA files, read as opening the store reads them.
fn store_errors(store: &StoreConfig, error_at: &ErrorAt) -> Vec<ConfigError> {
    crate::store::unusable_settings(store)
        .into_iter()
        .map(|error| error_at(error.setting.field(), error.cause.to_string()))
        .collect()
}

/// A certificate, key or CA problem, at the field that names the file.
pub fn tls_error(config: &Config, error: &TlsError) -> ConfigError {
    config.error_at(&error.field, error.cause.to_string())
}

//! Where the settings that name something outside the file are written: the
//! certificate, key and CA files, the store's URLs. What those name is read
//! after validation (`check`, `serve` at start, a reload), and a problem
//! found there is located as validation locates its own:
//! `FILE:LINE:COL: field: message`.

use std::collections::BTreeMap;
use std::path::Path;

use super::ConfigError;

#[derive(Debug, Clone, Default)]
pub struct Places {
    /// By the setting's name in the model (`store.url`, `admin.tls.cert`).
    at: BTreeMap<String, Place>,
}

#[derive(Debug, Clone)]
struct Place {
    /// As the file spells it: `store.url_env` for a URL read from the
    /// environment.
    written: String,
    line: usize,
    column: usize,
}

impl Places {
    pub(super) fn insert(&mut self, field: &str, written: &str, (line, column): (usize, usize)) {
        let written = written.to_owned();
        let place = Place {
            written,
            line,
            column,
        };
        self.at.insert(field.to_owned(), place);
    }

    /// A problem with `field` (as the model names it), located where the
    /// file writes it; a field not written there (a whole table) is said
    /// without a line.
    pub fn error(&self, file: &Path, field: &str, message: impl Into<String>) -> ConfigError {
        let place = self.at.get(field);
        ConfigError {
            file: file.to_path_buf(),
            line: place.map(|place| place.line),
            column: place.map(|place| place.column),
            field: place.map_or_else(|| field.to_owned(), |place| place.written.clone()),
            message: message.into(),
        }
    }
}

impl super::Config {
    /// A problem with what the setting `field` names (a file that cannot be
    /// read, a URL's TLS parameters), located in the file this config was
    /// read from.
    pub fn error_at(&self, field: &str, message: impl Into<String>) -> ConfigError {
        self.places.error(&self.source, field, message)
    }
}

impl super::StoreSettings {
    /// As [`Config::error_at`](super::Config::error_at), for the store
    /// commands, which read only the store's settings.
    pub fn error_at(&self, field: &str, message: impl Into<String>) -> ConfigError {
        self.places.error(&self.source, field, message)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    const ROUTES: &str = "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n\
        [[routes]]\nname = \"r\"\nupstream = \"api\"\nmatch = { path_prefix = \"/\" }\n";

    /// A URL read from the environment is said as the file writes it
    /// (`url_env`, where it is written); a setting not written is said
    /// without a line.
    #[test]
    fn a_setting_is_located_where_the_file_writes_it() {
        let text = format!("[store]\nbackend = \"postgres\"\nurl_env = \"DB\"\n{ROUTES}");
        let env = |_: &str| Some("postgres://u:secret@h/d".to_owned());
        let config = crate::config::parse(&text, Path::new("g.toml"), &env).unwrap();
        assert_eq!(
            config.error_at("store.url", "refused").to_string(),
            "g.toml:3:11: store.url_env: refused"
        );
        assert_eq!(
            config.error_at("server.tls", "refused").to_string(),
            "g.toml: server.tls: refused"
        );
        let text = format!("[admin.tls]\ncert = \"c.pem\"\n  key = \"k.pem\"\n{ROUTES}");
        let config = crate::config::parse(&text, Path::new("g.toml"), &env).unwrap();
        assert_eq!(
            config.error_at("admin.tls.key", "missing").to_string(),
            "g.toml:3:9: admin.tls.key: missing"
        );
    }
}

//! The settings opening the store reads before it connects: the Postgres URL
//! with its TLS parameters (`sslmode`, the `sslrootcert` file) and the Redis
//! URL with its `ca` file. A problem with one names the setting;
//! `open::unusable_settings` reads them all as opening does, without
//! connecting, so that `check` (and `serve` before it opens anything)
//! refuses what opening would refuse.

// The backends' cause files, not the backends: they build these errors.
use super::cache::cause::RedisCause;
use super::postgres::cause::PostgresCause;

/// Which setting of `[store]` a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// `store.url` (or `url_env`): the Postgres URL.
    Url,
    /// `store.redis.url` (or `url_env`).
    RedisUrl,
    /// `store.redis.ca`.
    RedisCa,
}

impl Setting {
    /// The setting's name; one given through `url_env` is still its URL's.
    pub fn field(self) -> &'static str {
        match self {
            Setting::Url => "store.url",
            Setting::RedisUrl => "store.redis.url",
            Setting::RedisCa => "store.redis.ca",
        }
    }
}

/// A setting the store cannot be opened with. Its text is `field: cause`,
/// never the URL (it may hold a password).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {cause}", .setting.field())]
pub struct SettingError {
    pub setting: Setting,
    pub cause: SettingCause,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SettingCause {
    #[error(transparent)]
    Postgres(#[from] PostgresCause),
    #[error(transparent)]
    Redis(#[from] RedisCause),
}

impl SettingError {
    pub fn new(setting: Setting, cause: impl Into<SettingCause>) -> Self {
        let cause = cause.into();
        Self { setting, cause }
    }
}

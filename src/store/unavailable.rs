//! Why the store could not do what was asked (`StoreError::Unavailable`):
//! the cause kept as a value, made text only where it is logged or
//! answered. Clone, because one failed batch answers each of its callers;
//! a source that is not `Clone` is held behind `Arc`.

use std::sync::Arc;

use super::StoreError;
use super::cache::RedisCause;
use super::embedded::EmbeddedCause;
use super::postgres::PostgresCause;
use super::refusal::Refusal;
use super::setting::SettingError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// The SQLite file, its thread, or what it holds.
    #[error(transparent)]
    Embedded(#[from] EmbeddedCause),
    /// PostgreSQL: its URL, connections, answers, schema.
    #[error(transparent)]
    Postgres(#[from] PostgresCause),
    /// Redis in front of Postgres: its URL, CA, or a purge it missed.
    #[error(transparent)]
    Redis(#[from] RedisCause),
    /// A setting opening the store reads (a URL, a CA file) cannot be
    /// used; names the setting.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The blocking task that opens or migrates the store did not finish
    /// (it panicked, or the runtime is shutting down).
    #[error("opening the store: {0}")]
    Opening(#[source] Arc<tokio::task::JoinError>),
    /// `[store.encryption]` is on and an answer could not be sealed: the
    /// system's random source gave no nonce. Never stored in clear instead.
    #[error("sealing the answer failed: the system's random source failed")]
    Sealing,
    /// The store's own bookkeeping broke a rule it keeps: a bug.
    #[error("{0}")]
    Invariant(&'static str),
}

impl From<EmbeddedCause> for StoreError {
    fn from(cause: EmbeddedCause) -> Self {
        StoreError::Unavailable(cause.into())
    }
}

impl From<PostgresCause> for StoreError {
    fn from(cause: PostgresCause) -> Self {
        StoreError::Unavailable(cause.into())
    }
}

impl From<RedisCause> for StoreError {
    fn from(cause: RedisCause) -> Self {
        StoreError::Unavailable(cause.into())
    }
}

impl From<SettingError> for StoreError {
    fn from(error: SettingError) -> Self {
        StoreError::Unavailable(error.into())
    }
}

impl Unavailable {
    /// Why the store refused, when it answered: `None` when it could not be
    /// reached, or failed otherwise.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            Unavailable::Embedded(cause) => cause.refusal(),
            Unavailable::Postgres(cause) => cause.refusal(),
            _ => None,
        }
    }
}

impl StoreError {
    /// The embedded file's write lock was held by another process past the
    /// busy timeout (`EmbeddedCause::locked_by_another_writer`).
    pub fn locked_by_another_writer(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(Unavailable::Embedded(cause)) if cause.locked_by_another_writer()
        )
    }

    /// `Unavailable::refusal`; `None` for any other error.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            StoreError::Unavailable(unavailable) => unavailable.refusal(),
            _ => None,
        }
    }

    /// A broken rule of the store's own bookkeeping (`Unavailable::Invariant`).
    pub fn invariant(rule: &'static str) -> Self {
        StoreError::Unavailable(Unavailable::Invariant(rule))
    }
}

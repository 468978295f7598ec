//! A SQLite failure, as the store reports it.

use std::sync::Arc;

use super::cause::EmbeddedCause;
use crate::store::StoreError;

pub(super) fn db(e: rusqlite::Error) -> StoreError {
    EmbeddedCause::Sqlite(Arc::new(e)).into()
}

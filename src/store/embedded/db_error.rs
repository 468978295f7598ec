//! A SQLite failure, as the store reports it.

use crate::store::StoreError;

pub(super) fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("sqlite: {e}"))
}

//! A record that holds what the store never writes (a damaged disk, a
//! restore gone wrong, a hand edit). It is told apart from a store that is
//! down (`StoreError::Unavailable`): the record exists, so its request may
//! have run, and `on_store_error = "pass"` must not forward it again.

/// Which part of a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stored {part} cannot be read")]
pub struct Damaged {
    pub part: &'static str,
}

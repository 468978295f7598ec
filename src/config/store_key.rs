//! `[store.encryption]`: the keys that seal stored answers at rest.

use std::fmt;

/// One key of `store.encryption.keys_env`: 32 bytes read from an
/// environment variable. A secret: its `Debug` shows the variable's name only.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreKey {
    /// The variable it was read from, for messages.
    pub env: String,
    pub bytes: [u8; 32],
}

impl fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreKey")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

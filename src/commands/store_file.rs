//! The store settings the store commands read, and the embedded store's
//! file when it does not exist.

use std::path::Path;

use super::output::EXIT_FAILURE;
use crate::config::{self, StoreSettings};

/// The embedded store's file when it does not exist. It holds no records
/// then, and the one-shot commands answer so without creating it: a
/// relative `store.path` is read from the working directory, so a command
/// run from another one would leave a stray empty store behind and say
/// nothing of it. Their stderr names the file looked for.
pub(super) fn missing_store_file(config: &StoreSettings) -> Option<std::path::PathBuf> {
    let crate::config::StoreConfig::Embedded(embedded) = &config.store else {
        return None;
    };
    if embedded.path.exists() {
        return None;
    }
    Some(std::path::absolute(&embedded.path).unwrap_or_else(|_| embedded.path.clone()))
}

/// Why a store that does not exist may still be the right one to ask.
pub(super) const RELATIVE_PATH: &str = "a relative store.path is read from the working directory";

/// The stderr line of `sweep` and `keys list`, which succeed on it.
pub(super) fn note_missing(file: &Path) {
    eprintln!(
        "note: the embedded store {} does not exist, so it holds no records ({RELATIVE_PATH})",
        file.display()
    );
}

/// The store commands' read of the file (`config::load_store_settings`),
/// and of the store's URLs and path as `check` reads them: a setting that
/// cannot be used is said where the file writes it, before any connection.
pub(super) fn load(path: &Path) -> Result<StoreSettings, i32> {
    let settings = config::load_store_settings(path).map_err(|errors| {
        eprintln!("{errors}");
        EXIT_FAILURE
    })?;
    let unusable = crate::preflight::unusable_store(&settings);
    for error in &unusable {
        eprintln!("{error}");
    }
    if unusable.is_empty() {
        Ok(settings)
    } else {
        Err(EXIT_FAILURE)
    }
}

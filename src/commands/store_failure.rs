//! A store failure as the commands say it: the store's own words, then
//! what to do when the cause tells.

use std::fmt;

use crate::store::StoreError;

/// `error` as the store words it, with what to do when its cause tells.
pub(super) fn explained(error: &StoreError) -> Explained<'_> {
    Explained(error)
}

pub(super) struct Explained<'a>(&'a StoreError);

impl fmt::Display for Explained<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = self.0;
        write!(f, "{error}")?;
        if error.locked_by_another_writer() {
            f.write_str(
                ": another process held the store file's write lock for 5 s: most likely \
                 `idemgate compact` rewriting the file (it holds it until done), else another \
                 command's batch (`sweep`, `migrate`, `keys purge`) or a program with the \
                 file open (sqlite3); run this again once it has ended",
            )?;
        }
        Ok(())
    }
}

//! What opening a store did to its schema: `serve` logs it at start and
//! `idemgate migrate` prints it, each in its own words.

/// The schema version a store had, the one it has now, and the migrations
/// applied between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// 0 when the store had no schema yet (a new file, an empty schema).
    pub found: i64,
    /// The binary's version, which the store is at once opened.
    pub now: i64,
    /// In order; empty when the store was up to date.
    pub applied: Vec<i64>,
}

impl MigrationReport {
    /// A store brought from `found` to `now` through every version between
    /// (the embedded file, migrated in one step that covers them all).
    pub fn stepped(found: i64, now: i64) -> Self {
        Self {
            found,
            now,
            applied: (found + 1..=now).collect(),
        }
    }

    pub fn up_to_date(&self) -> bool {
        self.applied.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stepped_lists_every_version_past_the_one_found() {
        assert_eq!(MigrationReport::stepped(0, 3).applied, vec![1, 2, 3]);
        assert_eq!(MigrationReport::stepped(2, 3).applied, vec![3]);
        assert!(MigrationReport::stepped(3, 3).up_to_date());
    }
}

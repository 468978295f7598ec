//! A privilege the role lacks, as the statement that gives it: what the
//! start and `/readyz` refuse with (`privileges`).

/// One `GRANT` the role lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `SELECT, INSERT`
    pub privileges: String,
    /// `TABLE` or `SEQUENCE`
    pub kind: String,
    /// schema-qualified, quoted where needed
    pub object: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GRANT {} ON {} {}",
            self.privileges, self.kind, self.object
        )
    }
}

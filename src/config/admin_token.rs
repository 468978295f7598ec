//! A bearer token `/admin/*` accepts, and where it was written: its source
//! is named in `check`, the log and errors, the token never.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub source: TokenSource,
    /// Trimmed, not empty, and only what an `Authorization` header carries.
    pub secret: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `admin.token`, written in the file.
    Inline,
    /// The value of this variable, listed in `admin.token_env`.
    Env(String),
}

/// Without the secret: a config is printed in test failures and debug logs.
impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminToken")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_leaves_the_secret_out() {
        let token = AdminToken {
            source: TokenSource::Env("TOK".into()),
            secret: "s3cret-0123456789".into(),
        };
        let shown = format!("{token:?}");
        assert!(shown.contains("TOK"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

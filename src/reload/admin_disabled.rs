//! Why `/admin/*` is off. Said in the log when `serve` starts and after
//! each reload, so an operator who gets 404 `not-found` finds the cause
//! without reading the code; the caller's answer does not name the variable.

use std::fmt;

use crate::config::AdminConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disabled {
    /// Neither `admin.token` nor `admin.token_env` is in the file.
    NotConfigured,
    /// `admin.token_env` names a variable the process was started without.
    VariableUnset(String),
    /// The variable is set, but empty or only whitespace.
    VariableEmpty(String),
    /// The variable holds bytes that are not UTF-8: no client could send them.
    VariableNotUnicode(String),
}

/// `None` while `/admin/*` is served. The variable is read again here, as
/// the config was when it was loaded, only to tell which case it is.
pub fn why(config: &AdminConfig) -> Option<Disabled> {
    if config.token.is_some() {
        return None;
    }
    let Some(name) = config.token_env.clone() else {
        return Some(Disabled::NotConfigured);
    };
    Some(match std::env::var(&name) {
        Err(std::env::VarError::NotPresent) => Disabled::VariableUnset(name),
        Err(std::env::VarError::NotUnicode(_)) => Disabled::VariableNotUnicode(name),
        Ok(_) => Disabled::VariableEmpty(name),
    })
}

/// One log line when `/admin/*` is disabled; nothing when it is served.
pub fn log(config: &AdminConfig) {
    if let Some(why) = why(config) {
        tracing::warn!("/admin/* is disabled (it answers 404 not-found): {why}");
    }
}

impl fmt::Display for Disabled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A process's environment is fixed when it starts: the variable must
        // be in the environment `serve` is started with.
        match self {
            Disabled::NotConfigured => {
                write!(f, "the file sets neither admin.token_env nor admin.token")
            }
            Disabled::VariableUnset(name) => write!(
                f,
                "admin.token_env names {name}, which is not set; export it before \
                 starting idemgate"
            ),
            Disabled::VariableEmpty(name) => write!(
                f,
                "admin.token_env names {name}, which is empty; export a token in it \
                 before starting idemgate"
            ),
            Disabled::VariableNotUnicode(name) => {
                write!(f, "admin.token_env names {name}, which is not valid UTF-8")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(token_env: Option<&str>, token: Option<&str>) -> AdminConfig {
        AdminConfig {
            token_env: token_env.map(str::to_owned),
            token: token.map(str::to_owned),
            tls: None,
        }
    }

    #[test]
    fn each_reason_names_its_cause() {
        assert_eq!(why(&config(Some("X"), Some("t0ken"))), None);
        assert_eq!(why(&config(None, Some("t0ken"))), None);
        assert_eq!(why(&config(None, None)), Some(Disabled::NotConfigured));
        let unset = why(&config(Some("IDEMGATE_UNIT_SURELY_UNSET_VARIABLE"), None)).unwrap();
        assert!(
            unset
                .to_string()
                .contains("IDEMGATE_UNIT_SURELY_UNSET_VARIABLE, which is not set")
        );
        // PATH is set in any environment the tests run in: the config
        // holding no token for it means it read as blank.
        assert_eq!(
            why(&config(Some("PATH"), None)),
            Some(Disabled::VariableEmpty("PATH".into()))
        );
    }
}

//! Why `/admin/*` is off. Said in the log when `serve` starts and after
//! each reload, so an operator who gets 404 `not-found` finds the cause
//! without reading the code; the caller's answer does not name the variable.

use std::fmt;

use crate::config::AdminConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disabled {
    /// Neither `admin.token` nor `admin.token_env` is in the file.
    NotConfigured,
    /// No variable `admin.token_env` lists holds a token: each with why, in
    /// the file's order.
    NoToken(Vec<(String, Blank)>),
}

/// Why a listed variable holds no token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blank {
    /// The process was started without it.
    Unset,
    /// It is set, but empty or only whitespace.
    Empty,
    /// It holds bytes that are not UTF-8: no client could send them.
    NotUnicode,
}

/// `None` while `/admin/*` is served. The variables are read again here,
/// as the config was when it was loaded, only to tell which case it is.
pub fn why(config: &AdminConfig) -> Option<Disabled> {
    if !config.tokens.is_empty() {
        return None;
    }
    if config.token_env.is_empty() {
        return Some(Disabled::NotConfigured);
    }
    let blank = |name: &String| {
        let why = match std::env::var(name) {
            Err(std::env::VarError::NotPresent) => Blank::Unset,
            Err(std::env::VarError::NotUnicode(_)) => Blank::NotUnicode,
            Ok(_) => Blank::Empty,
        };
        (name.clone(), why)
    };
    Some(Disabled::NoToken(
        config.token_env.iter().map(blank).collect(),
    ))
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
            Disabled::NoToken(variables) => match variables.as_slice() {
                [(name, Blank::Unset)] => write!(
                    f,
                    "admin.token_env names {name}, which is not set; export it before \
                     starting idemgate"
                ),
                [(name, Blank::Empty)] => write!(
                    f,
                    "admin.token_env names {name}, which is empty; export a token in it \
                     before starting idemgate"
                ),
                [(name, Blank::NotUnicode)] => {
                    write!(f, "admin.token_env names {name}, which is not valid UTF-8")
                }
                several => {
                    let each: Vec<String> = (several.iter())
                        .map(|(name, why)| format!("{name} ({})", why.said()))
                        .collect();
                    write!(
                        f,
                        "admin.token_env lists {}, and none holds a token; export one of \
                         them before starting idemgate",
                        each.join(", ")
                    )
                }
            },
        }
    }
}

impl Blank {
    fn said(self) -> &'static str {
        match self {
            Blank::Unset => "not set",
            Blank::Empty => "empty",
            Blank::NotUnicode => "not valid UTF-8",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AdminToken, TokenSource};

    fn config(token_env: &[&str], token: Option<&str>) -> AdminConfig {
        let source = match token_env.first() {
            Some(name) => TokenSource::Env((*name).to_owned()),
            None => TokenSource::Inline,
        };
        AdminConfig {
            token_env: token_env.iter().map(|name| (*name).to_owned()).collect(),
            tokens: (token.iter())
                .map(|secret| AdminToken {
                    source: source.clone(),
                    secret: (*secret).to_owned(),
                })
                .collect(),
            tls: None,
        }
    }

    const UNSET: &str = "IDEMGATE_UNIT_SURELY_UNSET_VARIABLE";

    #[test]
    fn each_reason_names_its_cause() {
        assert_eq!(why(&config(&["X"], Some("t0ken"))), None);
        assert_eq!(why(&config(&[], Some("t0ken"))), None);
        assert_eq!(why(&config(&[], None)), Some(Disabled::NotConfigured));
        let unset = why(&config(&[UNSET], None)).unwrap();
        assert!(
            unset
                .to_string()
                .contains("IDEMGATE_UNIT_SURELY_UNSET_VARIABLE, which is not set")
        );
        // PATH is set in any environment the tests run in: the config
        // holding no token for it means it read as blank.
        assert_eq!(
            why(&config(&["PATH"], None)),
            Some(Disabled::NoToken(vec![("PATH".into(), Blank::Empty)]))
        );
    }

    /// A list is served while any of its variables holds a token; with
    /// none, the line names each and why.
    #[test]
    fn a_list_is_disabled_only_when_no_variable_holds_a_token() {
        assert_eq!(why(&config(&["X", UNSET], Some("t0ken"))), None);
        let none = why(&config(&[UNSET, "PATH"], None)).unwrap();
        assert_eq!(
            none.to_string(),
            "admin.token_env lists IDEMGATE_UNIT_SURELY_UNSET_VARIABLE (not set), PATH \
             (empty), and none holds a token; export one of them before starting idemgate"
        );
    }
}

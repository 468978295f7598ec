//! What the validation tests share: a file parsed with a given environment,
//! accepted or refused with its located errors.

use std::path::Path;

use crate::config::{Config, ConfigErrors, parse};

pub(super) fn ok_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Config {
    match parse(text, Path::new("t.toml"), env) {
        Ok(config) => config,
        Err(errors) => panic!("unexpected errors:\n{errors}"),
    }
}

pub(super) fn ok(text: &str) -> Config {
    ok_with(text, &|_| None)
}

pub(super) fn errors_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    match parse(text, Path::new("t.toml"), env) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(ConfigErrors(errors)) => errors.iter().map(ToString::to_string).collect(),
    }
}

pub(super) fn errors(text: &str) -> Vec<String> {
    errors_with(text, &|_| None)
}

/// Asserts exactly one error, starting with `prefix` and containing `part`.
pub(super) fn single(text: &str, prefix: &str, part: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with(prefix), "{}", errors[0]);
    assert!(errors[0].contains(part), "{}", errors[0]);
}

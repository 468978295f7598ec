//! `[admin]`: the token inline or from one variable, or from a list of
//! them while one is rotated; what is refused and what is warned about,
//! never quoting a token.

use std::path::Path;

use super::super::test_support::{errors, errors_with, ok, ok_with, single};
use crate::config::{Config, TokenSource, parse};

const MINIMAL: &str = crate::config::ONE_ROUTE;

/// The admin tokens, in order: the secrets themselves, for tests only.
fn admin_secrets(config: &Config) -> Vec<&str> {
    (config.admin.tokens.iter())
        .map(|token| token.secret.as_str())
        .collect()
}

#[test]
fn admin_token_from_env_or_disabled() {
    let text = format!("[admin]\ntoken_env = \"TOK\"\n{MINIMAL}");
    let env = |name: &str| (name == "TOK").then(|| "s3cret".to_owned());
    let config = parse(&text, Path::new("t.toml"), &env).expect("valid");
    assert_eq!(admin_secrets(&config), ["s3cret"]);
    assert_eq!(
        config.admin.tokens[0].source,
        TokenSource::Env("TOK".into())
    );
    assert_eq!(config.admin.token_env, ["TOK"]);
    let unset = ok(&text);
    assert!(unset.admin.tokens.is_empty());
    assert_eq!(unset.admin.token_env, ["TOK"]);
    assert!(unset.warnings.is_empty(), "{:?}", unset.warnings);
    let empty = parse(&text, Path::new("t.toml"), &|_| Some(String::new())).expect("valid");
    assert!(empty.admin.tokens.is_empty());
    // From a secret file, with its newline: the token is what precedes it.
    let file = parse(&text, Path::new("t.toml"), &|_| Some("s3cret\n".into())).expect("valid");
    assert_eq!(admin_secrets(&file), ["s3cret"]);
    let blank = parse(&text, Path::new("t.toml"), &|_| Some(" \n".into())).expect("valid");
    assert!(blank.admin.tokens.is_empty());
}

/// docs/configuration.md: a secret may be inline as well as in `*_env`. Both at once, or
/// an empty inline token, is an error naming the field; the token itself is
/// never quoted back.
#[test]
fn admin_token_inline() {
    let text = format!("[admin]\ntoken = \"0123456789abcdef-inline\"\n{MINIMAL}");
    let config = ok(&text);
    assert_eq!(admin_secrets(&config), ["0123456789abcdef-inline"]);
    assert_eq!(config.admin.tokens[0].source, TokenSource::Inline);
    assert!(config.admin.token_env.is_empty());
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);

    let both = format!("[admin]\ntoken = \"0123456789abcdef\"\ntoken_env = \"TOK\"\n{MINIMAL}");
    single(&both, "t.toml:2:9: admin.token:", "not both");
    for message in errors(&both) {
        assert!(!message.contains("0123456789abcdef"), "{message}");
    }
    let empty = format!("[admin]\ntoken = \"  \"\n{MINIMAL}");
    single(&empty, "t.toml:2:9: admin.token:", "empty");

    let short = ok(&format!("[admin]\ntoken = \"CHANGE-ME\"\n{MINIMAL}"));
    assert_eq!(short.warnings.len(), 1, "{:?}", short.warnings);
    assert!(
        short.warnings[0].starts_with("t.toml:2:9: admin.token:"),
        "{:?}",
        short.warnings
    );
    assert!(!short.warnings[0].contains("CHANGE-ME"));
}

/// A token holding a character no client can send in `Authorization` (a
/// control character, anything beyond ASCII) would refuse every call to
/// `/admin/*`: refused, naming the field (and the variable), never the token.
#[test]
fn an_admin_token_no_client_can_send_is_refused() {
    let inline = format!("[admin]\ntoken = \"0123456789\\u0001abcdef\"\n{MINIMAL}");
    single(&inline, "t.toml:2:9: admin.token:", "cannot send");
    let inline = format!("[admin]\ntoken = \"0123456789abcdéf\"\n{MINIMAL}");
    single(&inline, "t.toml:2:9: admin.token:", "cannot send");
    let text = format!("[admin]\ntoken_env = \"TOK\"\n{MINIMAL}");
    for token in [
        "0123456789\u{7f}abcdef",
        "0123456789abcdéf",
        "0123\r\n456789abcdef",
    ] {
        let errors = errors_with(&text, &|_| Some(token.into()));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.toml:2:13: admin.token_env:"),
            "{errors:?}"
        );
        assert!(errors[0].contains("TOK"), "{errors:?}");
        assert!(!errors[0].contains("abcd"), "{errors:?}");
    }
    // Spaces and tabs inside it can be sent.
    let spaced = parse(&text, Path::new("t.toml"), &|_| {
        Some("0123456789 abc\tdef".into())
    });
    assert!(spaced.is_ok(), "{spaced:?}");
}

/// A short admin token (a placeholder left in place) is warned about, by
/// its length, never quoted; a long one is not.
#[test]
fn a_short_admin_token_is_warned_about_without_quoting_it() {
    let text = format!("[admin]\ntoken_env = \"TOK\"\n{MINIMAL}");
    let short = parse(&text, Path::new("t.toml"), &|_| Some("CHANGE-ME".into())).expect("valid");
    assert_eq!(admin_secrets(&short), ["CHANGE-ME"]);
    assert_eq!(short.warnings.len(), 1, "{:?}", short.warnings);
    let warning = &short.warnings[0];
    assert!(
        warning.starts_with("t.toml:2:13: admin.token_env:"),
        "{warning}"
    );
    assert!(warning.contains("9 characters"), "{warning}");
    assert!(!warning.contains("CHANGE-ME"), "{warning}");
    let long = parse(&text, Path::new("t.toml"), &|_| {
        Some("0123456789abcdef".into())
    })
    .expect("valid");
    assert!(long.warnings.is_empty(), "{:?}", long.warnings);
    assert!(ok(&text).warnings.is_empty());
}

const NEW: &str = "n3w-token-0123456789";
const OLD: &str = "0ld-token-0123456789";

fn rotation_env(name: &str) -> Option<String> {
    match name {
        "ADMIN_NEW" => Some(format!("{NEW}\n")),
        "ADMIN_OLD" => Some(OLD.into()),
        "ADMIN_BLANK" => Some(" \n".into()),
        "ADMIN_SHORT" => Some("CHANGE-ME".into()),
        "ADMIN_BAD" => Some("0123456789abcdéf".into()),
        _ => None,
    }
}

fn listed(names: &str) -> String {
    format!("[admin]\ntoken_env = {names}\n{MINIMAL}")
}

/// Each listed variable's token is accepted, in the file's order, each
/// named by its variable; one name written as a list is that name.
#[test]
fn a_list_of_variables_gives_each_its_token() {
    let config = ok_with(&listed(r#"["ADMIN_NEW", "ADMIN_OLD"]"#), &rotation_env);
    assert_eq!(admin_secrets(&config), [NEW, OLD]);
    assert_eq!(config.admin.token_env, ["ADMIN_NEW", "ADMIN_OLD"]);
    let sources: Vec<&TokenSource> = config.admin.tokens.iter().map(|t| &t.source).collect();
    assert_eq!(
        sources,
        [
            &TokenSource::Env("ADMIN_NEW".into()),
            &TokenSource::Env("ADMIN_OLD".into())
        ]
    );
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let one = ok_with(&listed(r#"["ADMIN_NEW"]"#), &rotation_env);
    assert_eq!(admin_secrets(&one), [NEW]);
}

/// A rotation under way: a listed variable that holds no token (unset, or
/// blank) is warned about by its place and name while another holds one;
/// with none holding one, `/admin/*` is disabled, as with one variable,
/// and nothing is warned (the log at start says why).
#[test]
fn a_listed_variable_without_a_token_is_warned_about_while_another_has_one() {
    let config = ok_with(
        &listed(r#"["ADMIN_NEW", "ADMIN_GONE", "ADMIN_BLANK"]"#),
        &rotation_env,
    );
    assert_eq!(admin_secrets(&config), [NEW]);
    assert_eq!(
        config.admin.variables_without_token(),
        ["ADMIN_GONE", "ADMIN_BLANK"]
    );
    assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
    assert!(
        config.warnings[0]
            .starts_with("t.toml:2:27: admin.token_env[1]: ADMIN_GONE is not set or empty"),
        "{:?}",
        config.warnings
    );
    assert!(
        config.warnings[1].starts_with("t.toml:2:41: admin.token_env[2]: ADMIN_BLANK"),
        "{:?}",
        config.warnings
    );
    let none = ok_with(&listed(r#"["ADMIN_GONE", "ADMIN_BLANK"]"#), &rotation_env);
    assert!(none.admin.tokens.is_empty());
    assert_eq!(none.admin.token_env, ["ADMIN_GONE", "ADMIN_BLANK"]);
    assert!(none.warnings.is_empty(), "{:?}", none.warnings);
}

/// Every rule of one variable holds for each listed one, named by its
/// index: a token no client can send is an error naming the variable, a
/// short one a warning, neither quoting the token; `$NAME` is refused.
#[test]
fn each_listed_variable_is_held_to_the_rules_of_one() {
    let text = listed(r#"["ADMIN_NEW", "ADMIN_BAD"]"#);
    let errors = errors_with(&text, &rotation_env);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("t.toml:2:27: admin.token_env[1]: the value of ADMIN_BAD"),
        "{errors:?}"
    );
    assert!(errors[0].contains("cannot send"), "{errors:?}");
    assert!(!errors[0].contains("abcd"), "{errors:?}");

    let short = ok_with(&listed(r#"["ADMIN_NEW", "ADMIN_SHORT"]"#), &rotation_env);
    assert_eq!(short.warnings.len(), 1, "{:?}", short.warnings);
    let warning = &short.warnings[0];
    assert!(
        warning.starts_with("t.toml:2:27: admin.token_env[1]: the admin token is 9 characters"),
        "{warning}"
    );
    assert!(!warning.contains("CHANGE-ME"), "{warning}");

    single(
        &listed(r#"["ADMIN_NEW", "$ADMIN_OLD"]"#),
        "t.toml:2:27: admin.token_env[1]:",
        "as in \"ADMIN_OLD\"",
    );
}

/// An empty list names no token: a mistake, not a way to disable
/// `/admin/*` (leaving the field out is). A name listed twice is one
/// variable read twice: a rotation that lists the old one twice never
/// lists the new.
#[test]
fn an_empty_list_or_a_name_listed_twice_is_refused() {
    single(&listed("[]"), "t.toml:2:13: admin.token_env:", "empty");
    single(
        &listed(r#"["ADMIN_NEW", "ADMIN_OLD", "ADMIN_NEW"]"#),
        "t.toml:2:40: admin.token_env[2]:",
        "ADMIN_NEW is listed twice",
    );
    // With an inline token too: one or the other, as for one name.
    single(
        &format!("[admin]\ntoken = \"0123456789abcdef\"\ntoken_env = [\"ADMIN_NEW\"]\n{MINIMAL}"),
        "t.toml:2:9: admin.token:",
        "not both",
    );
}

/// `check` names where the tokens come from and which listed variable
/// holds none, never a token.
#[test]
fn check_names_the_variables_never_a_token() {
    let describe = |names: &str| crate::config::describe(&ok_with(&listed(names), &rotation_env));
    let both = describe(r#"["ADMIN_NEW", "ADMIN_OLD"]"#);
    assert!(
        both.contains("admin     tokens from ADMIN_NEW, ADMIN_OLD (any one is accepted)\n"),
        "{both}"
    );
    assert!(!both.contains(NEW) && !both.contains(OLD), "{both}");
    let partial = describe(r#"["ADMIN_NEW", "ADMIN_GONE"]"#);
    assert!(
        partial.contains("admin     token from ADMIN_NEW; no token in ADMIN_GONE\n"),
        "{partial}"
    );
    let none = describe(r#"["ADMIN_GONE", "ADMIN_BLANK"]"#);
    assert!(
        none.contains("admin     disabled (404): no token in ADMIN_GONE, ADMIN_BLANK\n"),
        "{none}"
    );
    let one = describe(r#""ADMIN_NEW""#);
    assert!(one.contains("admin     token from ADMIN_NEW\n"), "{one}");
    let inline = crate::config::describe(&ok(&format!("[admin]\ntoken = \"{NEW}\"\n{MINIMAL}")));
    assert!(
        inline.contains("admin     token inline (admin.token)\n"),
        "{inline}"
    );
    assert!(!inline.contains(NEW), "{inline}");
    let unset = crate::config::describe(&ok(MINIMAL));
    assert!(
        unset
            .contains("admin     disabled (404): neither admin.token_env nor admin.token is set\n"),
        "{unset}"
    );
}

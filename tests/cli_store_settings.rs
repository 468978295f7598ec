//! The store commands (`migrate`, `sweep`, `compact`, `keys`) refuse the
//! store settings `check` and `serve` refuse, in the same located words: a
//! configuration problem is said as one, never as a store that is down.

mod common;

use std::process::{Command, Output};

use common::TestDir;

const ROUTES: &str = r#"[upstreams.api]
url = "http://127.0.0.1:3000"

[[routes]]
name = "charges"
upstream = "api"
match = { path_prefix = "/v1/charges" }
"#;

/// Every store command, as an operator or a Job runs it.
const COMMANDS: [&[&str]; 6] = [
    &["migrate"],
    &["sweep"],
    &["compact"],
    &["keys", "show", "charges", "k1"],
    &["keys", "purge", "charges", "k1"],
    &["keys", "list", "charges"],
];

fn run(command: &[&str], config: &str, env: Option<(&str, &str)>) -> Output {
    let (verb, rest) = command.split_at(if command[0] == "keys" { 2 } else { 1 });
    let mut run = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    run.args(verb)
        .args(["-c", config])
        .args(rest)
        .env_remove("IDEMGATE_CONFIG");
    if let Some((name, value)) = env {
        run.env(name, value);
    }
    run.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A Postgres URL read from `url_env` that cannot be used is the field the
/// file writes, at its line, as `check` says it: not `store.url`, which the
/// file does not have, nor "store unavailable", which sends the operator
/// to a database that is fine. The URL's password is never said.
#[test]
fn a_postgres_url_from_the_environment_is_refused_where_the_file_names_it() {
    let dir = TestDir::new("cli-store-url-env");
    let config = dir.path("idemgate.toml");
    let name = config.to_str().unwrap();
    std::fs::write(
        &config,
        format!("[store]\nbackend = \"postgres\"\nurl_env = \"IDEMGATE_TEST_DB\"\n{ROUTES}"),
    )
    .unwrap();
    let cases = [
        (
            "postgres://u:hunter2@127.0.0.1:notaport/db",
            "invalid connection string: invalid value for option `port`",
        ),
        (
            "postgres://u:hunter2@127.0.0.1:5432/db?sslmode=verify-full&sslrootcert=/nonexistent.pem",
            "sslrootcert /nonexistent.pem: No such file or directory",
        ),
    ];
    for (url, cause) in cases {
        let expected = format!("{name}:3:11: store.url_env: {cause}");
        let env = Some(("IDEMGATE_TEST_DB", url));
        let out = run(&["check"], name, env);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains(&expected),
            "check: {}",
            text(&out.stderr)
        );
        for command in COMMANDS {
            let out = run(command, name, env);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
            assert!(stderr.contains(&expected), "{command:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{command:?}: {stderr}");
            assert!(!stderr.contains("unavailable"), "{command:?}: {stderr}");
            assert!(!stderr.contains("hunter2"), "{command:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{command:?}");
        }
    }
}

/// An embedded `store.path` that is a directory, or another file given by
/// mistake, is said as `check` says it, and left as it was.
#[test]
fn an_embedded_store_path_that_is_no_store_file_is_refused_as_check_refuses_it() {
    let dir = TestDir::new("cli-store-path-commands");
    let config = dir.path("idemgate.toml");
    let name = config.to_str().unwrap();
    let notes = dir.path("notes.txt");
    std::fs::write(&notes, "not a database\n").unwrap();
    std::fs::create_dir(dir.path("data")).unwrap();
    let cases = [
        (
            notes.clone(),
            "is not a store file: it is not an SQLite database",
        ),
        (dir.path("data"), "is a directory, not a store file"),
    ];
    for (store, cause) in cases {
        let store = store.display().to_string();
        std::fs::write(&config, format!("[store]\npath = \"{store}\"\n{ROUTES}")).unwrap();
        let expected = format!("{name}:2:8: store.path: {store} {cause}");
        for command in COMMANDS {
            let out = run(command, name, None);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
            assert!(stderr.contains(&expected), "{command:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{command:?}: {stderr}");
        }
    }
    assert_eq!(std::fs::read(&notes).unwrap(), b"not a database\n");
}

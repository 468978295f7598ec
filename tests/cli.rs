//! The command line: exit codes and messages an operator relies on.

mod common;

use std::process::{Command, Output};

use common::{GatewayProcess, TestDir};

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `file` at `path` and runs `check` on it, which must refuse it
/// (exit 1, no "FILE: ok"); its stderr. `what` names the case in a failure.
fn check_refuses(path: &std::path::Path, file: impl AsRef<[u8]>, what: &str) -> String {
    std::fs::write(path, file).unwrap();
    let out = idemgate(&["check", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(!text(&out.stdout).contains(": ok"), "{what}");
    stderr
}

#[test]
fn no_subcommand_prints_help() {
    let out = idemgate(&[]);
    let help = text(&out.stderr) + &text(&out.stdout);
    for command in ["serve", "check", "migrate", "sweep", "keys"] {
        assert!(help.contains(command), "{help}");
    }
    assert!(!out.status.success());
}

#[test]
fn check_accepts_the_shipped_configs_and_prints_the_routes() {
    let out = idemgate(&["check", "-c", "config/idemgate.toml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("charges") && stdout.contains("/v1/charges"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rest") && stdout.contains("pass-through"),
        "{stdout}"
    );
    // The whole effective policy, the replay marker and exclusions included.
    for line in [
        "forward key    true",
        "replay header  Idempotent-Replayed",
        "replay exclude set-cookie",
        "max in-flight  no limit",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }

    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c", "config/examples/postgres-redis.toml"])
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1/test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `-c`, else `$IDEMGATE_CONFIG` (an empty one is unset), else
/// `config/idemgate.toml` in the working directory.
#[test]
fn the_config_file_is_looked_up_in_order() {
    let dir = TestDir::new("cli-lookup");
    std::fs::create_dir_all(dir.path("config")).unwrap();
    std::fs::write(dir.path("config/idemgate.toml"), VALID).unwrap();
    std::fs::write(dir.path("from-env.toml"), VALID).unwrap();
    std::fs::write(dir.path("from-flag.toml"), VALID).unwrap();
    let check = |args: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
        command.current_dir(&dir.0).arg("check").args(args);
        match env {
            Some(value) => command.env("IDEMGATE_CONFIG", value),
            None => command.env_remove("IDEMGATE_CONFIG"),
        };
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let ok = |file: &str| format!("{file}: ok");
    let flag = check(&["-c", "from-flag.toml"], Some("from-env.toml"));
    assert!(flag.contains(&ok("from-flag.toml")), "{flag}");
    let env = check(&[], Some("from-env.toml"));
    assert!(env.contains(&ok("from-env.toml")), "{env}");
    let default = check(&[], None);
    assert!(default.contains(&ok("config/idemgate.toml")), "{default}");
    let empty = check(&[], Some(""));
    assert!(empty.contains(&ok("config/idemgate.toml")), "{empty}");
}

const VALID: &str = r#"[upstreams.api]
url = "http://127.0.0.1:3000"

[[routes]]
name = "charges"
upstream = "api"
match = { path_prefix = "/v1/charges" }
"#;

/// Each broken file makes `check` exit 1 with `FILE:LINE...: FIELD: ...`.
#[test]
fn check_rejects_bad_configs_naming_file_line_and_field() {
    let dir = TestDir::new("cli-check");
    let cases: &[(&str, String, usize, &str)] = &[
        ("unknown field", VALID.replace("url =", "urll ="), 2, "urll"),
        (
            "bad duration",
            format!("{VALID}retention = \"3 days\"\n"),
            8,
            "retention",
        ),
        (
            "bad size",
            format!("[server]\nmax_request_body = \"1 lightyear\"\n{VALID}"),
            2,
            "max_request_body",
        ),
        (
            "unknown upstream",
            VALID.replace("upstream = \"api\"", "upstream = \"nope\""),
            6,
            "upstream",
        ),
        (
            "duplicate route",
            format!(
                "{VALID}\n[[routes]]\nname = \"charges\"\nupstream = \"api\"\nmatch = {{ path = \"/x\" }}\n"
            ),
            10,
            "name",
        ),
        (
            "no routes",
            "[upstreams.api]\nurl = \"http://127.0.0.1:3000\"\n".to_string(),
            0,
            "routes",
        ),
        (
            "lock_timeout too short",
            VALID.replace(
                "url = \"http://127.0.0.1:3000\"",
                "url = \"http://127.0.0.1:3000\"\ntimeout = \"90s\"",
            ),
            0,
            "lock_timeout",
        ),
    ];
    for (what, content, line, field) in cases {
        let path = dir.path("bad.toml");
        let stderr = check_refuses(&path, content, what);
        assert!(
            stderr.contains(path.to_str().unwrap()),
            "{what}: no file in {stderr}"
        );
        assert!(
            stderr.contains(field),
            "{what}: no field {field} in {stderr}"
        );
        if *line > 0 {
            assert!(
                stderr.contains(&format!("bad.toml:{line}:")),
                "{what}: no line {line} in {stderr}"
            );
        }
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn serve_exits_64_on_a_config_error_and_1_on_a_busy_port() {
    let dir = TestDir::new("cli-serve");
    let path = dir.path("bad.toml");
    std::fs::write(&path, "[server]\nlisten = \"nowhere\"\n").unwrap();
    let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("listen"));

    let missing = idemgate(&["serve", "-c", "/nonexistent/idemgate.toml"]);
    assert_eq!(missing.status.code(), Some(64));
    assert!(text(&missing.stderr).contains("/nonexistent/idemgate.toml"));

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap();
    let admin = common::gateway::free_port();
    let config = format!(
        "[server]\nlisten = \"{port}\"\nadmin_listen = \"{admin}\"\n[store]\npath = \"{}\"\n{VALID}",
        dir.path("store.db").display()
    );
    std::fs::write(&path, config).unwrap();
    let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr
            .trim()
            .lines()
            .filter(|l| l.starts_with("idemgate:"))
            .count(),
        1,
        "{stderr}"
    );
}

/// `VALID` on an embedded store file of `dir`'s own (`store.db`).
fn embedded_config(dir: &TestDir) -> std::path::PathBuf {
    let path = dir.path("idemgate.toml");
    let store = dir.path("store.db");
    std::fs::write(
        &path,
        format!("[store]\npath = \"{}\"\n{VALID}", store.display()),
    )
    .unwrap();
    path
}

/// [`embedded_config`], its store file created by `idemgate migrate`.
fn migrated_embedded_config(dir: &TestDir) -> std::path::PathBuf {
    let path = embedded_config(dir);
    let out = idemgate(&["migrate", "-c", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    path
}

#[test]
fn keys_and_sweep_work_on_the_embedded_store() {
    let dir = TestDir::new("cli-keys");
    let path = embedded_config(&dir);
    let config = path.to_str().unwrap();
    let out = idemgate(&["sweep", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("0 expired records deleted"));
    let out = idemgate(&["keys", "show", "-c", config, "charges", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no records"));
    let out = idemgate(&["keys", "show", "-c", config, "nosuchroute", "k"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nosuchroute"));
}

/// The one-shot commands run from another working directory than the
/// gateway's find no file at a relative `store.path`: they say which file
/// they looked for, answer as for an empty store, and create nothing.
#[test]
fn store_commands_create_no_embedded_store_and_name_the_file_they_looked_for() {
    let dir = TestDir::new("cli-no-store");
    let config = dir.path("idemgate.toml");
    std::fs::write(
        &config,
        format!("[store]\npath = \"data/here.db\"\n{VALID}"),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let wanted = dir.path("data/here.db");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .current_dir(&dir.0)
            .args(args)
            .env_remove("IDEMGATE_CONFIG")
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("{} does not exist", wanted.display())),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        out
    };
    for action in ["show", "purge"] {
        let out = run(&["keys", action, "-c", config, "charges", "k1"]);
        assert_eq!(out.status.code(), Some(1), "{action}");
        assert!(text(&out.stderr).starts_with("no records for this key"));
    }
    let out = run(&["sweep", "-c", config]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "0 expired records deleted\n");
    let out = run(&["keys", "list", "-c", config, "charges"]);
    assert_eq!(out.status.code(), Some(0));
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page, serde_json::json!({ "records": [], "next": null }));
    assert!(!dir.path("data").exists(), "a store was created");
}

/// `check` (and `serve`) refuse a webhook secret, region token or sealing
/// key that is not set; the store commands use none and run without them, as
/// a migration job or an operator's shell is given only the store's settings.
#[test]
fn store_commands_need_no_webhook_secret_nor_region_token_nor_sealing_key() {
    let dir = TestDir::new("cli-store-secrets");
    let config = dir.path("idemgate.toml");
    let store = dir.path("store.db");
    std::fs::write(
        &config,
        format!(
            r#"[store]
path = "{}"
[store.encryption]
keys_env = ["IDEMGATE_TEST_UNSET_SEALING_KEY"]

[region]
name = "eu"
token_env = "IDEMGATE_TEST_UNSET_REGION_TOKEN"
[regions.eu]
gateway = "http://127.0.0.1:1"
[regions.us]
gateway = "http://127.0.0.1:2"

[upstreams.api]
url = "http://127.0.0.1:3000"

[[routes]]
name = "hooks"
upstream = "api"
match = {{ path = "/hooks" }}
webhook = {{ scheme = "stripe", secrets_env = ["IDEMGATE_TEST_UNSET_WHSEC"] }}
"#,
            store.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let out = idemgate(&["check", "-c", config]);
    assert_eq!(out.status.code(), Some(1));
    let refused = text(&out.stderr);
    assert!(refused.contains("IDEMGATE_TEST_UNSET_WHSEC"), "{refused}");
    assert!(
        refused.contains("IDEMGATE_TEST_UNSET_REGION_TOKEN"),
        "{refused}"
    );
    assert!(
        refused.contains("IDEMGATE_TEST_UNSET_SEALING_KEY"),
        "{refused}"
    );

    let out = idemgate(&["migrate", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = idemgate(&["sweep", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "0 expired records deleted\n");
    let out = idemgate(&["keys", "list", "-c", config, "hooks"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = idemgate(&["keys", "show", "-c", config, "hooks", "evt_1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no records"),
        "{}",
        text(&out.stderr)
    );
}

/// A report piped to a reader that has gone away (`idemgate keys show … |
/// head`) is cut short quietly, with the command's own exit code: it used
/// to panic on the broken pipe, backtrace and all.
#[test]
fn a_closed_stdout_is_no_panic() {
    let dir = TestDir::new("cli-epipe");
    let path = embedded_config(&dir);
    let config = path.to_str().unwrap();
    for (args, code) in [
        (&["check", "-c", config][..], 0),
        (&["migrate", "-c", config][..], 0),
        (&["sweep", "-c", config][..], 0),
        // No records: `[]` on stdout, the reason on stderr, exit 1.
        (&["keys", "show", "-c", config, "charges", "nope"][..], 1),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(args)
            .env_remove("IDEMGATE_CONFIG")
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    }
    // Any other failure to write (a full disk) fails the command, in one line.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["sweep", "-c", config])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("idemgate: cannot write to stdout") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// `migrate` on the embedded store says what it did to the file: made it,
/// or found it current (it used to say "up to date" in every case).
#[test]
fn migrate_reports_what_it_did_to_the_embedded_file() {
    let dir = TestDir::new("cli-migrate");
    let path = embedded_config(&dir);
    let store = dir.path("store.db");
    let config = path.to_str().unwrap();
    let out = idemgate(&["migrate", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("store.db created (schema version"),
        "{stdout}"
    );
    assert!(store.exists());
    let out = idemgate(&["migrate", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("store.db schema is up to date (version"),
        "{stdout}"
    );
}

/// The log lines of `serve` about the store's schema, one per start.
fn schema_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains("store schema"))
        .collect()
}

/// `serve` says once per start what it found of the store's schema and
/// what it left: the version found (0: no file yet), the version now and
/// the migrations applied, or that it was up to date. It said nothing, and
/// an operator upgrading could not tell whether a migration had run.
#[tokio::test]
async fn serve_logs_the_embedded_schema_it_found_and_left() {
    let (_dir, _upstream, mut gateway) = GatewayProcess::start_fresh(
        "cli-serve-schema",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let log = gateway.log_text();
    let lines = schema_lines(&log);
    assert_eq!(lines.len(), 1, "{log}");
    let created = lines[0];
    assert!(created.contains("store schema migrated"), "{created}");
    assert!(created.contains("schema_found=0"), "{created}");
    assert!(created.contains("schema_version=3"), "{created}");
    assert!(
        created.contains("migrations_applied=[1, 2, 3]"),
        "{created}"
    );
    assert!(created.contains("store=\"embedded\""), "{created}");

    gateway.restart();
    let log = gateway.log_text();
    let lines = schema_lines(&log);
    assert_eq!(lines.len(), 2, "{log}");
    let current = lines[1];
    assert!(current.contains("store schema up to date"), "{current}");
    assert!(current.contains("schema_found=3"), "{current}");
    assert!(current.contains("schema_version=3"), "{current}");
    assert!(current.contains("migrations_applied=[]"), "{current}");
}

/// docs/operating.md: every failure to start is one clear line on stderr, a bad
/// configuration too (one problem or several).
#[test]
fn serve_reports_a_bad_config_on_one_line() {
    let dir = TestDir::new("cli-one-line");
    let path = dir.path("bad.toml");
    let cases = [
        ("one problem", "[server]\nlisten = \"nowhere\"\n"),
        (
            "two problems",
            "[server]\nlisten = \"nowhere\"\nmax_request_body = \"1XB\"\n",
        ),
    ];
    for (what, config) in cases {
        std::fs::write(&path, config).unwrap();
        let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{what}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{what}: {stderr}");
        assert!(stderr.contains("bad.toml:2:"), "{what}: {stderr}");
        assert!(stderr.contains("server.listen"), "{what}: {stderr}");
    }
    let missing = idemgate(&["serve", "-c", "/nonexistent/idemgate.toml"]);
    let stderr = text(&missing.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// `check` reads the PEM files the config names, as `serve` does: a file it
/// calls ok must not then fail to start on a missing certificate.
#[test]
fn check_refuses_certificates_it_cannot_read() {
    let dir = TestDir::new("cli-check-tls");
    let path = dir.path("tls.toml");
    let missing = dir.path("missing.pem");
    let cases = [
        (
            "server.tls.cert",
            format!(
                "[server.tls]\ncert = \"{0}\"\nkey = \"{0}\"\n{VALID}",
                missing.display()
            ),
        ),
        (
            "upstreams.api.tls.ca",
            VALID.replace(
                "url = \"http://127.0.0.1:3000\"",
                &format!(
                    "url = \"https://127.0.0.1:3000\"\n[upstreams.api.tls]\nca = \"{}\"",
                    missing.display()
                ),
            ),
        ),
    ];
    for (field, config) in cases {
        let stderr = check_refuses(&path, config, field);
        assert!(stderr.contains(path.to_str().unwrap()), "{field}: {stderr}");
        assert!(stderr.contains(field), "{field}: {stderr}");
    }
}

/// An expired server certificate passed `check`
/// and started without a word, and every verifying client was refused. It
/// is a warning (the gateway still serves its admin plane and the clients
/// that do not verify), on `check`'s report and at start.
#[test]
fn check_and_serve_warn_about_an_expired_certificate() {
    let dir = TestDir::new("cli-expired-cert");
    let pki = common::certs::Pki::new("CA");
    let expired = pki.expired_server(&dir, "expired");
    let path = dir.path("expired.toml");
    let config = format!(
        "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\n\
         [server.tls]\ncert = \"{}\"\nkey = \"{}\"\n[store]\npath = \"{}\"\n{VALID}",
        common::gateway::free_port(),
        common::gateway::free_port(),
        expired.cert.display(),
        expired.key.display(),
        dir.path("store.db").display()
    );
    std::fs::write(&path, config).unwrap();
    let out = idemgate(&["check", "-c", path.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let warning = stdout
        .lines()
        .find(|line| line.contains("server.tls.cert"))
        .unwrap_or_else(|| panic!("no warning about the certificate: {stdout}"));
    assert!(warning.starts_with("warning: "), "{warning}");
    assert!(warning.contains("expired on"), "{warning}");
    assert!(text(&out.stderr).contains("expired on"));

    let mut serve = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "-c", path.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stderr = serve.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut logged = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut logged);
        logged
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    let _ = serve.kill();
    let _ = serve.wait();
    let logged = reader.join().unwrap();
    assert!(
        logged.lines().any(|line| line.contains("WARN")
            && line.contains("server.tls.cert")
            && line.contains("expired on")),
        "{logged}"
    );
}

/// A file with warnings (a shadowed route) that cannot start because its port
/// is taken still fails on exactly one stderr line: warnings are logged only
/// by a gateway that runs.
#[test]
fn a_busy_port_is_one_line_even_with_warnings() {
    let dir = TestDir::new("cli-busy-warn");
    let path = dir.path("busy.toml");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap();
    let admin = common::gateway::free_port();
    let config = format!(
        "[server]\nlisten = \"{port}\"\nadmin_listen = \"{admin}\"\n[store]\npath = \"{}\"\n{VALID}\n[[routes]]\nname = \"shadowed\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/v1/charges/x\" }}\n",
        dir.path("store.db").display()
    );
    std::fs::write(&path, config).unwrap();
    let check = idemgate(&["check", "-c", path.to_str().unwrap()]);
    let report = text(&check.stdout) + &text(&check.stderr);
    assert!(
        report.contains("warning:"),
        "the file has a warning: {report}"
    );
    let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    // Nor by the note an embedded store with durability = "process_crash" logs.
    let noted = std::fs::read_to_string(&path)
        .unwrap()
        .replace("[store]\n", "[store]\ndurability = \"process_crash\"\n");
    std::fs::write(&path, noted).unwrap();
    let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// A SIGHUP while `serve` is still opening its store (here a "Postgres" that
/// accepts the connection and never answers) does not end the process with
/// the signal's default action: the start goes on (and here fails on the
/// store, in its one line).
#[test]
fn a_sighup_while_starting_does_not_kill_serve() {
    let dir = TestDir::new("cli-early-hup");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let child = serve_against_a_silent_postgres(&dir, &silent, "2s");
    std::thread::sleep(std::time::Duration::from_millis(500));
    common::gateway::send_signal(child.id(), "HUP");
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?} {stderr}", out.status);
    assert!(stderr.contains("cannot open the store"), "{stderr}");
    drop(silent);
}

/// `serve` whose Postgres refuses the connection stops with one line that
/// names where it dialed (host and port from `store.url`), never the
/// password nor the URL.
#[test]
fn a_refused_postgres_at_start_is_named_by_its_address() {
    let dir = TestDir::new("cli-pg-refused");
    let closed = common::gateway::free_port();
    let config = format!(
        "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\n\
         [store]\nbackend = \"postgres\"\n\
         url = \"postgres://postgres:hunter2-secret@{closed}/test\"\n{VALID}",
        common::gateway::free_port(),
        common::gateway::free_port(),
    );
    let path = dir.path("idemgate.toml");
    std::fs::write(&path, config).unwrap();
    let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("postgres at {closed}: ")),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!stderr.contains("postgres://"), "{stderr}");
}

/// `serve` on a "Postgres" that accepts connections and never answers
/// (`silent`), so it stays in its start for up to `connect_timeout`.
fn serve_against_a_silent_postgres(
    dir: &TestDir,
    silent: &std::net::TcpListener,
    connect_timeout: &str,
) -> std::process::Child {
    let config = format!(
        "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\n\
         [store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@{}/test\"\n\
         connect_timeout = \"{connect_timeout}\"\n{VALID}",
        common::gateway::free_port(),
        common::gateway::free_port(),
        silent.local_addr().unwrap(),
    );
    let path = dir.path("idemgate.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "-c", path.to_str().unwrap()])
        .env_remove("IDEMGATE_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// A SIGTERM or SIGINT while `serve` is still opening its store (a "Postgres"
/// that accepts the connection and never answers) stops the start at once,
/// exit 0, rather than by the signal's default action: as a container's
/// first process (PID 1, the image's ENTRYPOINT) the default action is none
/// at all, and the gateway went on to serve, ready, until it was killed.
#[test]
fn a_stop_signal_while_starting_stops_serve() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for signal in ["TERM", "INT"] {
        let dir = TestDir::new("cli-early-stop");
        let child = serve_against_a_silent_postgres(&dir, &silent, "20s");
        std::thread::sleep(std::time::Duration::from_millis(500));
        common::gateway::send_signal(child.id(), signal);
        let asked = std::time::Instant::now();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{signal}: {:?} {stderr}",
            out.status
        );
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(10),
            "{signal}: the start went on"
        );
        assert!(stderr.contains("stopped while starting"), "{stderr}");
    }
    drop(silent);
}

/// docs/configuration.md: `check` warns about a route an earlier one shadows; the
/// warning is in the report on stdout and, for whoever reads the streams
/// apart, on stderr too. The file is still valid: exit 0.
#[test]
fn check_warns_about_a_shadowed_route_on_both_streams() {
    let dir = TestDir::new("cli-shadow");
    let path = dir.path("shadow.toml");
    let config = format!(
        "{VALID}\n[[routes]]\nname = \"shadowed\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/v1/charges/x\" }}\n"
    );
    std::fs::write(&path, config).unwrap();
    let out = idemgate(&["check", "-c", path.to_str().unwrap()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for stream in [&stdout, &stderr] {
        assert!(
            stream.contains("warning:") && stream.contains("\"shadowed\" is shadowed"),
            "stdout: {stdout}\nstderr: {stderr}"
        );
    }
    assert!(stderr.contains("shadow.toml:9:"), "{stderr}");
}

/// The same file sent to one place (`2>&1` into a pipe or a log, as CI runs
/// it): each warning is said once, not once per stream.
#[test]
fn check_says_each_warning_once_when_both_streams_are_one_file() {
    let dir = TestDir::new("cli-shadow-once");
    let path = dir.path("shadow.toml");
    let config = format!(
        "{VALID}\n[[routes]]\nname = \"shadowed\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/v1/charges/x\" }}\n"
    );
    std::fs::write(&path, config).unwrap();
    let both = std::fs::File::create(dir.path("both.txt")).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c", path.to_str().unwrap()])
        .env_remove("IDEMGATE_CONFIG")
        .stdout(both.try_clone().unwrap())
        .stderr(both)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let written = std::fs::read_to_string(dir.path("both.txt")).unwrap();
    assert_eq!(written.matches("is shadowed").count(), 1, "{written}");
}

/// docs/operating.md: a log filter tracing cannot parse is refused at start in one
/// line, as clap refuses any bad argument (exit 2), not replaced by `info`.
/// `RUST_LOG` stands in for `--log-level` and is held to the same rule; the
/// flag, when given, wins over it.
#[test]
fn an_unparsable_log_level_is_a_one_line_usage_error() {
    let shipped = "config/idemgate.toml";
    let run = |args: &[&str], rust_log: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
        command.args(args).env_remove("IDEMGATE_CONFIG");
        match rust_log {
            Some(value) => command.env("RUST_LOG", value),
            None => command.env_remove("RUST_LOG"),
        };
        command.output().unwrap()
    };
    let refused = [
        (
            "--log-level",
            run(
                &["--log-level", "idemgate=lots", "check", "-c", shipped],
                None,
            ),
        ),
        (
            "--log-level",
            run(&["check", "-c", shipped, "--log-level", "foo["], None),
        ),
        (
            "RUST_LOG",
            run(&["check", "-c", shipped], Some("idemgate=lots")),
        ),
        // tracing takes a filter with no directive for "errors only".
        (
            "--log-level",
            run(&["--log-level", "", "check", "-c", shipped], None),
        ),
        ("RUST_LOG", run(&["check", "-c", shipped], Some(" , "))),
    ];
    for (source, out) in refused {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{source}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{source}: {stderr}");
        assert!(errors[0].contains(source), "{source}: {stderr}");
        assert!(!stderr.contains("panicked"), "{source}: {stderr}");
        assert!(!text(&out.stdout).contains(": ok"), "{source}: check ran");
    }
    for (what, out) in [
        (
            "a valid flag",
            run(
                &["--log-level", "idemgate=debug,warn", "check", "-c", shipped],
                None,
            ),
        ),
        (
            "a valid RUST_LOG",
            run(&["check", "-c", shipped], Some("warn")),
        ),
        (
            "the flag over RUST_LOG",
            run(
                &["--log-level", "info", "check", "-c", shipped],
                Some("foo["),
            ),
        ),
    ] {
        assert_eq!(out.status.code(), Some(0), "{what}: {}", text(&out.stderr));
    }
}

/// `check` refuses a Postgres store URL that `serve` could not open: its
/// scheme must be `postgres://` or `postgresql://`, given inline or through
/// `url_env`. The error names file, line and field, never the URL (a secret).
#[test]
fn check_refuses_a_store_url_of_another_scheme() {
    let dir = TestDir::new("cli-store-url");
    let path = dir.path("pg.toml");
    let config = path.to_str().unwrap();
    let check = |store: &str, database_url: &str| {
        std::fs::write(
            &path,
            format!("[store]\nbackend = \"postgres\"\n{store}\n{VALID}"),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check", "-c", config])
            .env("DATABASE_URL", database_url)
            .output()
            .unwrap()
    };
    let secret = "mysql://admin:hunter2@db/orders";
    for (store, field) in [
        (format!("url = \"{secret}\""), "pg.toml:3:7: store.url:"),
        (
            "url_env = \"DATABASE_URL\"".to_owned(),
            "pg.toml:3:11: store.url_env:",
        ),
    ] {
        let out = check(&store, secret);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{store}: {stderr}");
        assert!(stderr.contains(config), "{store}: {stderr}");
        assert!(stderr.contains(field), "{store}: {stderr}");
        assert!(stderr.contains("postgres://"), "{store}: {stderr}");
        assert!(!stderr.contains("hunter2"), "the URL is a secret: {stderr}");
    }
    for url in [
        "postgres://postgres@127.0.0.1/test",
        "postgresql://postgres@127.0.0.1/test",
    ] {
        for store in [
            format!("url = \"{url}\""),
            "url_env = \"DATABASE_URL\"".to_owned(),
        ] {
            let out = check(&store, url);
            assert_eq!(out.status.code(), Some(0), "{store}: {}", text(&out.stderr));
        }
    }
}

/// docs/operating.md: `keys show|purge` take their KEY argument as stored,
/// as `keys list` prints it: `"k1"` is the four-byte key a JSON body can
/// give, never read as the key `k1` a header `"k1"` gives, and finds
/// nothing here (saying that a quoted key is stored without its quotes,
/// exit 1). A key no source could give is one line on stderr and exit 1,
/// without the key.
#[tokio::test]
async fn keys_takes_the_key_as_stored() {
    let (_dir, _upstream, mut gateway) = GatewayProcess::start_fresh(
        "cli-key-syntax",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let reply = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(reply.status, 201);
    gateway.kill();
    let config = gateway.config_path().to_str().unwrap().to_owned();

    let out = idemgate(&["keys", "show", "-c", &config, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"completed\""));
    for action in ["show", "purge"] {
        let out = idemgate(&["keys", action, "-c", &config, "charges", "\"k1\""]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{action}: {stderr}");
        assert!(stderr.starts_with("no records for this key"), "{stderr}");
        assert!(stderr.contains("stored without its quotes"), "{stderr}");
    }
    let out = idemgate(&["keys", "purge", "-c", &config, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 record deleted\n");
    let out = idemgate(&["keys", "show", "-c", &config, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(1), "purged");

    for key in ["a\tsecret", "\u{1}secret", &"k".repeat(256)] {
        for action in ["show", "purge"] {
            let out = idemgate(&["keys", action, "-c", &config, "charges", key]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{action} {key}: {stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{action} {key}: {stderr}");
            assert!(stderr.contains("invalid idempotency key"), "{stderr}");
            assert!(!stderr.contains("secret"), "{stderr}");
        }
    }
}

/// docs/operating.md: `keys purge` logs (on stderr) one info line per purge
/// that deleted records, with the route, the key's short hash and how many;
/// never the key. One that found nothing says only "no records".
#[tokio::test]
async fn keys_purge_is_logged_with_the_keys_hash_never_the_key() {
    const KEY: &str = "audit-key-c0ffee";
    let (_dir, _upstream, mut gateway) =
        GatewayProcess::start_fresh("cli-purge-log", &common::config::Config::charges_and_rest())
            .await;
    let reply = gateway.client().post("/v1/charges", Some(KEY), "{}").await;
    assert_eq!(reply.status, 201);
    gateway.kill();
    let config = gateway.config_path().to_str().unwrap().to_owned();

    let out = idemgate(&["keys", "purge", "-c", &config, "charges", KEY]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "1 record deleted\n");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("key purged"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    for part in [
        "INFO",
        "route=\"charges\"",
        &format!("key={}", idemgate::key::short_hash(KEY)),
        "records=1",
        "by=\"idemgate keys purge\"",
    ] {
        assert!(lines[0].contains(part), "{part} not in {stderr}");
    }
    assert!(!stderr.contains(KEY), "{stderr}");

    let out = idemgate(&["keys", "purge", "-c", &config, "charges", KEY]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("key purged"), "{stderr}");
}

/// A route renamed (or removed) in the file keeps its records until they
/// expire: `keys show|purge` find them by the old name, as `keys list` and the
/// admin API do, and say the file has no such route when there are none.
#[tokio::test]
async fn keys_finds_the_records_of_a_route_the_file_no_longer_has() {
    let config = common::config::Config::charges_and_rest();
    let (_dir, _upstream, mut gateway) =
        GatewayProcess::start_fresh("cli-keys-renamed", &config).await;
    let reply = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(reply.status, 201);
    gateway.kill();
    gateway.write_config(&config.rename_route("charges", "payments"));
    let path = gateway.config_path().to_str().unwrap().to_owned();

    let out = idemgate(&["keys", "list", "-c", &path, "charges"]);
    assert!(
        text(&out.stdout).contains("\"k1\""),
        "{}",
        text(&out.stderr)
    );
    let out = idemgate(&["keys", "show", "-c", &path, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"completed\""));
    let out = idemgate(&["keys", "purge", "-c", &path, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1 record deleted\n");

    for action in ["show", "purge"] {
        let out = idemgate(&["keys", action, "-c", &path, "charges", "k1"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{action}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "no records for this key on route \"charges\" ({path} has no route named \"charges\")\n"
            ),
            "{action}"
        );
    }
    // A misspelt route lists nothing: the empty page is said to be one of a
    // route the file does not have, and fails, as `show` and `purge` do.
    let out = idemgate(&["keys", "list", "-c", &path, "charges"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!("no records on route \"charges\" ({path} has no route named \"charges\")\n")
    );
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page, serde_json::json!({ "records": [], "next": null }));
    // A route the file has lists its empty page and succeeds.
    let out = idemgate(&["keys", "list", "-c", &path, "payments"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
}

/// The embedded store is for one gateway process: a second `serve` on the
/// file of a running one fails at start with one line naming the file (its
/// copies of replays would miss the first one's purges), while `keys` and
/// `sweep` still work beside the running gateway, and once it has gone
/// (killed: the kernel drops its lock) the file serves again.
#[tokio::test]
async fn a_second_serve_on_the_same_embedded_file_fails_at_start() {
    let (_dir, _upstream, mut gateway) = GatewayProcess::start_fresh(
        "cli-serve-lock",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let reply = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(reply.status, 201);
    let config = gateway.config_path().to_str().unwrap().to_owned();

    // The store is opened before the listeners are bound: the same config
    // (same ports) meets the lock first.
    let out = idemgate(&["serve", "-c", &config]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("store.db is already served by another idemgate process"),
        "{stderr}"
    );

    let out = idemgate(&["keys", "show", "-c", &config, "charges", "k1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = idemgate(&["sweep", "-c", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = idemgate(&["migrate", "-c", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("up to date"));
    let replay = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    gateway.kill();
    gateway.restart();
    let replay = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
}

/// `keys purge` beside a running embedded gateway frees the key by the time
/// it returns: the retry right after it runs again, though the gateway had
/// just replayed the answer from its memory (which kept it for 5 s).
#[tokio::test]
async fn keys_purge_beside_a_running_embedded_gateway_frees_the_key_at_once() {
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh(
        "cli-purge-running",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let client = gateway.client();
    let config = gateway.config_path().to_str().unwrap().to_owned();
    for round in 1..=3 {
        let replay = client.post("/v1/charges", Some("k1"), "{}").await;
        assert_eq!(replay.status, 201, "{}", replay.text());
        if round == 1 {
            assert_eq!(replay.header("idempotent-replayed"), Some("false"));
        }
        let replay = client.post("/v1/charges", Some("k1"), "{}").await;
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        let out = idemgate(&["keys", "purge", "-c", &config, "charges", "k1"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let again = client.post("/v1/charges", Some("k1"), "{}").await;
        assert_eq!(
            again.header("idempotent-replayed"),
            Some("false"),
            "round {round}"
        );
        assert_eq!(upstream.executions("k1"), 2 * round);
        let out = idemgate(&["keys", "purge", "-c", &config, "charges", "k1"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// Swept and purged records leave free pages SQLite reuses but never gives
/// back: `compact` returns them, with no gateway serving the file (one that
/// does is named), and the records left replay as before. A Postgres store
/// is pointed to its own tools.
#[tokio::test]
async fn compact_gives_back_the_space_of_deleted_records() {
    let (dir, _upstream, mut gateway) =
        GatewayProcess::start_fresh("cli-compact", &common::config::Config::charges_and_rest())
            .await;
    let client = gateway.client();
    for i in 0..20 {
        let key = format!("k{i}");
        let reply = client
            .post("/v1/charges?pad=100000", Some(&key), "{}")
            .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
    }
    let config = gateway.config_path().to_str().unwrap().to_owned();

    let out = idemgate(&["compact", "-c", &config]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is served by a running idemgate") && stderr.contains("store.db-lock"),
        "{stderr}"
    );

    gateway.kill();
    for i in 1..20 {
        let out = idemgate(&["keys", "purge", "-c", &config, "charges", &format!("k{i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = idemgate(&["compact", "-c", &config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let sizes: Vec<u64> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    assert!(line.ends_with(" bytes after\n"), "{line}");
    let [before, after] = sizes[..] else {
        panic!("{line}");
    };
    assert!(before > 2_000_000, "{line}");
    assert!(after < 500_000, "{line}");
    let on_disk = std::fs::metadata(dir.path("store.db")).unwrap().len();
    assert_eq!(on_disk, after, "the WAL is emptied into the file");

    gateway.restart();
    let replay = gateway
        .client()
        .post("/v1/charges?pad=100000", Some("k0"), "{}")
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert!(replay.text().contains(&"p".repeat(100_000)));
    let fresh = gateway.client().post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(fresh.header("idempotent-replayed"), Some("false"));
}

#[test]
fn compact_names_postgres_tools_on_a_postgres_store() {
    let dir = TestDir::new("cli-compact-pg");
    let path = dir.path("idemgate.toml");
    std::fs::write(
        &path,
        format!("[store]\nbackend = \"postgres\"\nurl = \"postgres://127.0.0.1:1/none\"\n{VALID}"),
    )
    .unwrap();
    let out = idemgate(&["compact", "-c", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("VACUUM FULL idemgate_records"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// `check` refuses a Redis URL that `serve` could not open (another scheme);
/// `redis://` and `rediss://` (TLS) both open.
#[test]
fn check_refuses_a_redis_url_serve_cannot_open() {
    let dir = TestDir::new("cli-redis-url");
    let path = dir.path("redis.toml");
    let config = path.to_str().unwrap();
    for (url, code) in [
        ("http://127.0.0.1:6379", 1),
        ("rediss://127.0.0.1:6379", 0),
        ("redis://127.0.0.1:6379", 0),
    ] {
        std::fs::write(
            &path,
            format!(
                "[store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1/test\"\n[store.redis]\nurl = \"{url}\"\n{VALID}"
            ),
        )
        .unwrap();
        let out = idemgate(&["check", "-c", config]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{url}: {stderr}");
        if code == 1 {
            assert!(
                stderr.contains("redis.toml:5:7: store.redis.url:"),
                "{stderr}"
            );
            assert!(stderr.contains("redis://"), "{stderr}");
        }
    }
}

/// docs/operating.md: logs go to stderr, and a log reader that goes away (a collector
/// restarted, `serve 2>&1 | head`) must not take the gateway with it. Each
/// log line then failed to write, tracing reported that with `eprintln!`,
/// which panics on a closed stderr: every request's task died before its
/// answer, and the signal task at "shutting down", so SIGTERM stopped
/// nothing.
#[tokio::test]
async fn a_closed_stderr_stops_neither_requests_nor_shutdown() {
    use std::io::BufRead;

    let dir = TestDir::new("cli-closed-stderr");
    let upstream = common::MockUpstream::start().await;
    let (listen, admin) = (common::gateway::free_port(), common::gateway::free_port());
    let path = dir.path("idemgate.toml");
    let config = common::gateway::render(
        &common::config::Config::charges_and_rest(),
        &dir,
        &upstream.url(),
        listen,
        admin,
    );
    std::fs::write(&path, config).unwrap();
    // Killed on drop: a failing run would otherwise leave a gateway that
    // SIGTERM does not stop.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "-c", path.to_str().unwrap()])
            .env_remove("IDEMGATE_CONFIG")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("idemgate serving") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "serve exited");
    }
    drop(stderr);

    let client = common::Client::new(listen);
    let reply = client.post("/v1/charges", Some("k1"), "{}").await;
    assert_eq!(reply.status, 201);
    assert_eq!(client.get("/echo").await.status, 200);

    common::gateway::send_signal(child.0.id(), "TERM");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            panic!("serve did not stop on SIGTERM with its stderr closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// `check -c FILE` as a script runs it, with `DATABASE_URL` set for `url_env`.
fn check_with_database_url(path: &std::path::Path, database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "-c", path.to_str().unwrap()])
        .env_remove("IDEMGATE_CONFIG")
        .env("DATABASE_URL", database_url)
        .output()
        .unwrap()
}

/// `check` passed an `[admin.tls]` whose files
/// `serve` then could not read. Each is read as the admin listener reads
/// it, and refused at the field's line and column.
#[test]
fn check_refuses_admin_certificates_it_cannot_read() {
    let dir = TestDir::new("cli-check-admin-tls");
    let path = dir.path("admin.toml");
    let config = path.to_str().unwrap();
    let pki = common::certs::Pki::new("CA");
    let server = pki.server(&dir, "admin");
    let client_ca = pki.write_ca(&dir, "operators.pem");
    let missing = dir.path("missing.pem");
    let admin = |cert: &std::path::Path, key: &std::path::Path, ca: &std::path::Path| {
        format!(
            "[admin.tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n{VALID}",
            cert.display(),
            key.display(),
            ca.display()
        )
    };
    for (file, field) in [
        (
            admin(&missing, &server.key, &client_ca),
            "2:8: admin.tls.cert:",
        ),
        (
            admin(&server.cert, &missing, &client_ca),
            "3:7: admin.tls.key:",
        ),
        (
            admin(&server.cert, &server.key, &missing),
            "4:13: admin.tls.client_ca:",
        ),
    ] {
        let stderr = check_refuses(&path, file, field);
        let line = stderr
            .lines()
            .find(|line| line.starts_with(&format!("{config}:{field} ")));
        assert!(
            line.is_some_and(|line| line.contains(missing.to_str().unwrap())),
            "{stderr}"
        );
    }
    std::fs::write(&path, admin(&server.cert, &server.key, &client_ca)).unwrap();
    let out = idemgate(&["check", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `[store.redis]` is read as opening the store reads it: a CA file `serve`
/// cannot use, or a URL asking for TLS without verification, fails `check`
/// at the field; a readable CA passes.
#[test]
fn check_refuses_redis_tls_settings_serve_cannot_use() {
    let dir = TestDir::new("cli-check-redis-ca");
    let path = dir.path("redis.toml");
    let config = path.to_str().unwrap();
    let redis = |ca: &std::path::Path| {
        format!(
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1/test\"\n\
             [store.redis]\nurl = \"rediss://127.0.0.1:6379/7\"\nca = \"{}\"\n{VALID}",
            ca.display()
        )
    };
    let missing = dir.path("missing-ca.pem");
    let stderr = check_refuses(&path, redis(&missing), "");
    assert!(
        stderr.contains(&format!(
            "{config}:6:6: store.redis.ca: cannot read {}",
            missing.display()
        )),
        "{stderr}"
    );

    // An empty or non-PEM file is a CA that trusts nothing: Redis would be
    // down for good.
    for (name, body) in [("empty-ca.pem", ""), ("text-ca.pem", "not a certificate\n")] {
        let ca = dir.path(name);
        std::fs::write(&ca, body).unwrap();
        let stderr = check_refuses(&path, redis(&ca), name);
        assert!(
            stderr.contains(&format!(
                "{config}:6:6: store.redis.ca: no certificate in {}",
                ca.display()
            )),
            "{stderr}"
        );
    }

    let ca = common::certs::Pki::new("redis CA").write_ca(&dir, "redis-ca.pem");
    std::fs::write(&path, redis(&ca)).unwrap();
    let out = idemgate(&["check", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // `#insecure` (no verification) is a connection the client refuses at
    // every try: Redis would be down for good.
    let stderr = check_refuses(&path, redis(&ca).replace("/7\"", "/7#insecure\""), "");
    assert!(
        stderr.contains(&format!("{config}:5:7: store.redis.url: #insecure")),
        "{stderr}"
    );
}

/// The Postgres URL's TLS parameters are read as opening the store reads
/// them (the `sslrootcert` file too), given inline or through `url_env`:
/// what `serve` refuses fails `check` at the field, never quoting the URL
/// (it holds the password).
#[test]
fn check_refuses_postgres_tls_parameters_serve_refuses() {
    let dir = TestDir::new("cli-check-pg-tls");
    let path = dir.path("pg.toml");
    let config = path.to_str().unwrap();
    let base = "postgres://app:hunter2@127.0.0.1/orders";
    let missing = dir.path("missing-root.pem");
    let refused = [
        (
            format!("sslmode=verify-full&sslrootcert={}", missing.display()),
            format!("sslrootcert {}", missing.display()),
        ),
        (
            "sslmode=verify-ca".to_owned(),
            "verify-ca is not supported".to_owned(),
        ),
        (
            format!("sslrootcert={}", missing.display()),
            "sslrootcert needs sslmode=verify-full".to_owned(),
        ),
        (
            "sslmode=bogus".to_owned(),
            "invalid value for option `sslmode`".to_owned(),
        ),
    ];
    // The URL written inline, or read from `DATABASE_URL`; where each is said.
    let forms = [
        ("url = \"{}\"", "3:7: store.url:"),
        ("url_env = \"DATABASE_URL\"", "3:11: store.url_env:"),
    ];
    let write = |store: &str, url: &str| {
        let store = store.replace("{}", url);
        let file = format!("[store]\nbackend = \"postgres\"\n{store}\n{VALID}");
        std::fs::write(&path, file).unwrap();
    };
    for (query, cause) in &refused {
        let url = format!("{base}?{query}");
        for (store, field) in forms {
            write(store, &url);
            let out = check_with_database_url(&path, &url);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{query} ({field}): {stderr}");
            assert!(
                stderr.contains(&format!("{config}:{field} ")),
                "{query}: {stderr}"
            );
            assert!(stderr.contains(cause), "{query}: {stderr}");
            assert!(!stderr.contains("hunter2"), "the URL is a secret: {stderr}");
            assert!(!text(&out.stdout).contains(": ok"), "{query}");
        }
    }

    let root = common::certs::Pki::new("postgres CA").write_ca(&dir, "pg-root.pem");
    for query in [
        format!("sslmode=verify-full&sslrootcert={}", root.display()),
        "sslmode=disable".to_owned(),
    ] {
        let url = format!("{base}?{query}");
        for (store, _) in forms {
            write(store, &url);
            let out = check_with_database_url(&path, &url);
            assert_eq!(out.status.code(), Some(0), "{query}: {}", text(&out.stderr));
        }
    }
}

/// A PEM file cut short (a copy that stopped early) or damaged is said in
/// words wherever the config names one: the END line it lacks, not that
/// line's bytes as a list of numbers, nor the Redis client's bare "Io".
#[test]
fn check_says_what_is_wrong_in_a_cut_short_or_damaged_pem_file() {
    let dir = TestDir::new("cli-check-cut-pem");
    let pki = common::certs::Pki::new("CA");
    let server = pki.server(&dir, "server");
    let ca = pki.ca_pem();
    let cut_cert = dir.path("cut.crt");
    std::fs::write(&cut_cert, &server.cert_pem[..server.cert_pem.len() / 2]).unwrap();
    let cut_key = dir.path("cut.key");
    std::fs::write(&cut_key, &server.key_pem[..server.key_pem.len() / 2]).unwrap();
    let cut_ca = dir.path("cut-ca.pem");
    std::fs::write(&cut_ca, &ca[..ca.len() / 2]).unwrap();
    let damaged_ca = dir.path("damaged-ca.pem");
    std::fs::write(&damaged_ca, ca.replacen("MII", "MI!", 1)).unwrap();
    let path = dir.path("cut.toml");
    let config = path.to_str().unwrap();
    let write = |cert: &std::path::Path, key: &std::path::Path, ca: &std::path::Path| {
        let file = format!(
            "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n\
             [store]\nbackend = \"postgres\"\n\
             url = \"postgres://postgres@localhost/test?sslmode=verify-full&sslrootcert={2}\"\n\
             [store.redis]\nurl = \"rediss://localhost:6379\"\nca = \"{2}\"\n{VALID}",
            cert.display(),
            key.display(),
            ca.display()
        );
        std::fs::write(&path, file).unwrap();
    };
    write(&cut_cert, &server.key, &cut_ca);
    let out = idemgate(&["check", "-c", config]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let cut = "no \"-----END CERTIFICATE-----\" line (is the file cut short?)";
    for field in [
        "2:8: server.tls.cert",
        "6:7: store.url",
        "9:6: store.redis.ca",
    ] {
        let line = stderr
            .lines()
            .find(|line| line.starts_with(&format!("{config}:{field}: ")))
            .unwrap_or_else(|| panic!("{field} not named: {stderr}"));
        assert!(line.contains(cut), "{field}: {line}");
    }
    assert!(!stderr.contains("[67, 69"), "{stderr}");
    assert!(!stderr.contains("(Io)"), "{stderr}");

    write(&server.cert, &cut_key, &damaged_ca);
    let out = idemgate(&["check", "-c", config]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{config}:3:7: server.tls.key: no usable private key in {}: a block has no \
             \"-----END PRIVATE KEY-----\" line",
            cut_key.display()
        )),
        "{stderr}"
    );
    for field in ["6:7: store.url", "9:6: store.redis.ca"] {
        let line = stderr
            .lines()
            .find(|line| line.starts_with(&format!("{config}:{field}: ")))
            .unwrap_or_else(|| panic!("{field} not named: {stderr}"));
        assert!(line.contains("not valid base64"), "{field}: {line}");
    }
    assert!(!stderr.contains("InvalidCharacter"), "{stderr}");
    assert!(!stderr.contains("(Io)"), "{stderr}");
}

/// `serve` reads the same before it opens the store: what `check` refuses
/// is one line naming the file, line and field, exit 1, and no database is
/// reached (none listens here).
#[test]
fn serve_refuses_unusable_tls_files_and_store_settings_before_opening_the_store() {
    let dir = TestDir::new("cli-serve-unusable");
    let path = dir.path("serve.toml");
    let config = path.to_str().unwrap();
    let (listen, admin) = (common::gateway::free_port(), common::gateway::free_port());
    let server = format!("[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\n");
    let postgres =
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://app:hunter2@127.0.0.1:1/orders";
    let missing = dir.path("missing.pem");
    let empty = dir.path("empty.pem");
    std::fs::write(&empty, "").unwrap();
    for (file, expected) in [
        (
            format!(
                "{server}{postgres}\"\n[admin.tls]\ncert = \"{0}\"\nkey = \"{0}\"\n{VALID}",
                missing.display()
            ),
            format!(
                "{config}:8:8: admin.tls.cert: cannot read {}",
                missing.display()
            ),
        ),
        (
            format!("{server}{postgres}?sslmode=verify-ca\"\n{VALID}"),
            format!("{config}:6:7: store.url: sslmode=verify-ca is not supported"),
        ),
        (
            format!(
                "{server}{postgres}\"\n[store.redis]\nurl = \"rediss://127.0.0.1:1\"\nca = \"{}\"\n{VALID}",
                missing.display()
            ),
            format!(
                "{config}:9:6: store.redis.ca: cannot read {}",
                missing.display()
            ),
        ),
        (
            format!(
                "{server}{postgres}\"\n{VALID}[upstreams.billing]\nurl = \"https://127.0.0.1:1\"\n\
                 [upstreams.billing.tls]\nca = \"{}\"\n",
                empty.display()
            ),
            format!(
                "{config}:17:6: upstreams.billing.tls.ca: no certificate in {}",
                empty.display()
            ),
        ),
        (
            format!(
                "{server}{postgres}\"\n[store.redis]\nurl = \"rediss://127.0.0.1:1\"\nca = \"{}\"\n{VALID}",
                empty.display()
            ),
            format!(
                "{config}:9:6: store.redis.ca: no certificate in {}",
                empty.display()
            ),
        ),
    ] {
        std::fs::write(&path, file).unwrap();
        let out = idemgate(&["serve", "-c", config]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with(&format!("idemgate: {expected}")),
            "{stderr}"
        );
        assert!(!stderr.contains("hunter2"), "the URL is a secret: {stderr}");
    }
}

/// An embedded `store.path` that is a directory, or that runs through a
/// file, can be neither opened nor created: `check` says so at the field,
/// as `serve` does (one line, exit 1), instead of calling the file ok. A
/// path whose directories do not exist yet is fine (`serve` creates them),
/// and `check` creates nothing.
#[test]
fn check_refuses_a_store_path_that_cannot_be_a_file() {
    let dir = TestDir::new("cli-store-path");
    let config = dir.path("idemgate.toml");
    let name = config.to_str().unwrap().to_owned();
    std::fs::write(dir.path("plain"), "").unwrap();
    // Another file given by mistake: `serve` would stop at "file is not a
    // database" once it opened it.
    std::fs::write(dir.path("notes.txt"), "not a database\n").unwrap();
    let cases = [
        (dir.path(""), "is a directory, not a store file".to_owned()),
        (
            dir.path("notes.txt"),
            "is not a store file: it is not an SQLite database".to_owned(),
        ),
        (
            dir.path("plain/store.db"),
            format!(
                "cannot be created: {} is not a directory",
                dir.path("plain").display()
            ),
        ),
        (
            std::path::PathBuf::from("/dev/null"),
            "is not a regular file (a device, a socket or a pipe), not a store file".to_owned(),
        ),
    ];
    for (store, cause) in &cases {
        let store = store.display().to_string();
        let store = store.trim_end_matches('/');
        let stderr = check_refuses(
            &config,
            format!("[store]\npath = \"{store}\"\n{VALID}"),
            store,
        );
        assert!(
            stderr.contains(&format!("{name}:2:8: store.path: {store} {cause}")),
            "{store}: {stderr}"
        );
        let out = idemgate(&["serve", "-c", &name]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{store}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{store}: {stderr}");
        assert!(stderr.contains(cause.as_str()), "{store}: {stderr}");
    }
    let later = dir.path("not/yet/store.db");
    std::fs::write(
        &config,
        format!("[store]\npath = \"{}\"\n{VALID}", later.display()),
    )
    .unwrap();
    let out = idemgate(&["check", "-c", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!dir.path("not").exists(), "check created a directory");
    // An empty file is a store yet to be written, as SQLite reads it.
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"{}\"\n{VALID}",
            dir.path("plain").display()
        ),
    )
    .unwrap();
    let out = idemgate(&["check", "-c", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// `serve` under `ulimit -n LIMITS` (bash's `ulimit` arguments), with
/// `config`; its process id is the shell's, which `exec`s it.
fn serve_under_ulimit(limits: &str, config: &std::path::Path) -> std::process::Child {
    Command::new("bash")
        .args([
            "-c",
            &format!("ulimit {limits} && exec \"$0\" serve -c \"$1\""),
            env!("CARGO_BIN_EXE_idemgate"),
            config.to_str().unwrap(),
        ])
        .env_remove("IDEMGATE_CONFIG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// docs/operating.md, "Open files": a limit too low to start with is one
/// line, not the async runtime's panic.
#[test]
fn an_open_files_limit_too_low_to_start_is_said_in_words() {
    let dir = TestDir::new("cli-nofile-low");
    let config = dir.path("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\n[store]\npath = \"{}\"\n{VALID}",
            common::gateway::free_port(),
            common::gateway::free_port(),
            dir.path("store.db").display()
        ),
    )
    .unwrap();
    let out = serve_under_ulimit("-n 8", &config)
        .wait_with_output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "idemgate: the open files limit (ulimit -n) is 8, and its hard limit too; \
         idemgate needs at least 64"
    );
}

/// docs/operating.md, "Open files": the soft limit is raised to the hard
/// one, and a hard limit below what the connections need is warned of.
#[test]
fn serve_raises_the_open_files_limit_to_the_hard_one() {
    use std::io::BufRead;
    let dir = TestDir::new("cli-nofile-raise");
    let config = dir.path("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\nmax_connections = 5000\n\
             [store]\npath = \"{}\"\n{VALID}",
            common::gateway::free_port(),
            common::gateway::free_port(),
            dir.path("store.db").display()
        ),
    )
    .unwrap();
    let mut child = serve_under_ulimit("-Sn 100 && ulimit -Hn 2000", &config);
    let mut log = String::new();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    while !log.contains("idemgate serving") {
        match lines.next() {
            Some(line) => log += &(line.unwrap() + "\n"),
            None => break,
        }
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let open_files = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = open_files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["2000", "2000"], "{limits}");
    assert!(log.contains("idemgate serving"), "{log}");
    let warning = log
        .lines()
        .find(|line| line.contains("open files limit"))
        .unwrap_or_else(|| panic!("no warning: {log}"));
    assert!(
        warning.contains("limit=2000") && warning.contains("needed=5320"),
        "{warning}"
    );
}

/// The descriptors `serve` holds now.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// docs/operating.md, "Open files": with every descriptor taken, the
/// accept loop backs off and says so once per interval (not 20 lines a
/// second for as long as it lasts); a keyed request whose upstream
/// connection cannot be opened then gets 502 `upstream-unreachable` with
/// its key free, and once the connections holding the descriptors close,
/// the gateway serves again and the key runs.
#[tokio::test(flavor = "multi_thread")]
async fn out_of_open_files_the_gateway_backs_off_quietly_and_frees_the_key() {
    use tokio::io::AsyncWriteExt;
    const LIMIT: usize = 64;
    let (_dir, upstream, gateway) = GatewayProcess::start_fresh(
        "cli-nofile-out",
        &common::config::Config::charges_and_rest(),
    )
    .await;
    let pid = gateway.pid();
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit: {status}");
    // Accepted before the descriptors run out; its request comes after.
    let mut client = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let before = open_descriptors(pid);
    let mut held = Vec::new();
    while held.len() < LIMIT + 20 - before {
        held.push(std::net::TcpStream::connect(gateway.addr).unwrap());
    }
    let started = std::time::Instant::now();
    while open_descriptors(pid) < LIMIT {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "descriptors never ran out"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A descriptor the gateway held for a moment when they were counted (a
    // file its store or its metrics opened) is taken again by the accept
    // loop's next try, every 50 ms, from the connections still waiting.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(open_descriptors(pid) >= LIMIT, "descriptors freed again");
    client
        .write_all(
            b"POST /v1/charges HTTP/1.1\r\nHost: a\r\nIdempotency-Key: k-out\r\n\
              Content-Length: 2\r\n\r\n{}",
        )
        .await
        .unwrap();
    let reply = common::raw::read_reply(&mut client, std::time::Duration::from_secs(10)).await;
    assert_eq!(reply.status, Some(502), "{}", reply.text);
    assert!(
        reply.text.contains("upstream-unreachable"),
        "{}",
        reply.text
    );
    // Long enough for the old loop to have logged a line every 50 ms.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    drop(held);
    let retry = gateway
        .client()
        .post("/v1/charges", Some("k-out"), "{}")
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("false"));
    assert_eq!(upstream.executions("k-out"), 1);
    let log = gateway.log_text();
    let failed = log.matches("accept failed").count();
    assert!(failed >= 1, "out of descriptors, not said:\n{log}");
    assert!(failed <= 2, "{failed} lines for one shortage:\n{log}");
}

/// A "config" that never ends (`/dev/zero`, a device given by mistake) is
/// refused after a bounded read, naming the file, instead of filling memory
/// until the process is killed. A pipe (`-c <(envsubst < tmpl)`) still reads.
#[test]
fn check_refuses_a_file_that_never_ends() {
    for command in ["check", "serve", "sweep"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args([command, "-c", "/dev/zero"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{command} -c /dev/zero still reading after 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{command}: {stderr}");
        assert!(
            stderr.contains("/dev/zero: cannot read the file: larger than"),
            "{command}: {stderr}"
        );
    }
    let dir = TestDir::new("cli-config-pipe");
    let config = dir.path("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"{}\"\n{VALID}",
            dir.path("s.db").display()
        ),
    )
    .unwrap();
    let out = Command::new("bash")
        .args([
            "-c",
            "exec \"$0\" check -c <(cat \"$1\")",
            env!("CARGO_BIN_EXE_idemgate"),
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A key is named as the listing shows it: a key with a space
/// (`Idempotency-Key: "a b"`, `?idem=a+b`) is found as `a b`, one that
/// starts with a quote (`"q`, which the header `"\"q"` or a JSON body can
/// give) as `"q`. The header's quoted spellings are no names of them. A key
/// that no source can give is refused without being repeated.
#[tokio::test]
async fn a_key_is_named_as_the_listing_shows_it() {
    let (_dir, _upstream, gateway) =
        GatewayProcess::start_fresh("cli-key-space", &common::config::Config::charges_and_rest())
            .await;
    let client = gateway.client();
    let config = gateway.config_path().to_str().unwrap().to_owned();
    for sent in ["\"a b\"", "\"\\\"q\""] {
        let reply = client.post("/v1/charges", Some(sent), "{}").await;
        assert_eq!(reply.status, 201, "{sent}: {}", reply.text());
    }
    let out = idemgate(&["keys", "list", "-c", &config, "charges"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = listed["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["\"q", "a b"]);
    for named in ["a b", "\"q"] {
        let out = idemgate(&["keys", "show", "-c", &config, "charges", named]);
        assert_eq!(out.status.code(), Some(0), "{named}: {}", text(&out.stderr));
    }
    for header in ["\"a b\"", r#""\"q""#] {
        let out = idemgate(&["keys", "show", "-c", &config, "charges", header]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{header}: {}",
            text(&out.stderr)
        );
    }
    let out = idemgate(&["keys", "purge", "-c", &config, "charges", "a b"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reply = client.post("/v1/charges", Some("\"a b\""), "{}").await;
    assert_eq!(reply.header("idempotent-replayed"), Some("false"));

    for action in ["show", "purge"] {
        for refused in ["my\tsecret", "clé secret", ""] {
            let out = idemgate(&["keys", action, "-c", &config, "charges", refused]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
            assert!(stderr.starts_with("idemgate keys: "), "{stderr}");
            assert!(!stderr.contains("secret"), "{stderr}");
        }
    }
}

/// A Redis URL the client refuses is said in words, at `store.redis.url`,
/// never with its password (the URL is not repeated).
#[test]
fn check_says_what_is_wrong_with_a_redis_url() {
    let dir = TestDir::new("cli-redis-url-words");
    let path = dir.path("redis.toml");
    let config = path.to_str().unwrap();
    for (url, words) in [
        ("redis://:hunter2@127.0.0.1:99999", "invalid port number"),
        ("redis://:hunter2@127.0.0.1:0", "port 0"),
        ("redis://:hunter2@127.0.0.1:6379/abc", "database number"),
        ("redis://:hunter2@0.0.0.0:6379", "wildcard address"),
        ("redis:///", "no host"),
        // A Unix socket is not reachable through the client as built: said
        // so, whichever way the URL names it.
        (
            "unix:///run/redis.sock",
            "Unix socket URLs are not supported",
        ),
        (
            "redis+unix:///run/redis.sock",
            "Unix socket URLs are not supported",
        ),
        ("redis:///run/redis.sock", "Unix sockets are not supported"),
        // A socket path written as the host (`%2F` for `/`), and an IPv6
        // address without its brackets.
        (
            "redis://%2Ftmp%2Fr.sock",
            "store.redis.url: invalid URL: the host is a socket path",
        ),
        (
            "redis://:hunter2@%2Ftmp%2Fr.sock/0",
            "(Unix sockets are not supported)",
        ),
        (
            "redis://::1:6379",
            "store.redis.url: invalid URL: an IPv6 address is written in brackets, \
             as in redis://[::1]:6379",
        ),
        ("redis://:hunter2@::1", "in brackets"),
        ("redis://:hunter2@h/0?protocol=9", "protocol"),
        ("rediss://:hunter2@h#other", "fragment"),
    ] {
        std::fs::write(
            &path,
            format!(
                "[store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1/test\"\n[store.redis]\nurl = \"{url}\"\n{VALID}"
            ),
        )
        .unwrap();
        let out = idemgate(&["check", "-c", config]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(
            stderr.contains("redis.toml:5:7: store.redis.url:"),
            "{url}: {stderr}"
        );
        assert!(stderr.contains(words), "{url}: {stderr}");
        assert!(!stderr.contains("InvalidClientConfig"), "{url}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{url}: {stderr}");
    }
}

/// A request target is ASCII (a client percent-encodes the rest, and one
/// that does not gets 400), so a route path with a character beyond ASCII
/// could never match: `check` refuses it at its file, line and field, and
/// says how to write it percent-encoded.
#[test]
fn check_refuses_a_route_path_beyond_ascii() {
    let dir = TestDir::new("cli-path-ascii");
    let path = dir.path("paths.toml");
    for (field, written, said) in [
        ("path_prefix", "/café", "\"/caf%C3%A9\""),
        ("path", "/v1/ünits/€", "\"/v1/%C3%BCnits/%E2%82%AC\""),
    ] {
        let file = VALID.replace(
            "path_prefix = \"/v1/charges\"",
            &format!("{field} = \"{written}\""),
        );
        std::fs::write(&path, file).unwrap();
        let out = idemgate(&["check", "-c", path.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{written}: {stderr}");
        let column = 11 + field.len() + 3;
        let at = format!("paths.toml:7:{column}: routes[0].match.{field}:");
        assert!(stderr.contains(&at), "{at} in {stderr}");
        assert!(stderr.contains("percent-encode"), "{written}: {stderr}");
        assert!(stderr.contains(said), "{said} in {stderr}");
    }
    // Written percent-encoded, it passes.
    let file = VALID.replace("/v1/charges", "/caf%C3%A9");
    std::fs::write(&path, file).unwrap();
    let out = idemgate(&["check", "-c", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A value of a MiB refused is quoted by its start and length, and a name
/// or path past its length bound is said by its length: one short line
/// each, where the whole value would flood a terminal or a log.
#[test]
fn check_quotes_a_long_refused_value_shortened() {
    let dir = TestDir::new("cli-long-values");
    let path = dir.path("long.toml");
    let long = "x".repeat(1 << 20);
    for (file, said) in [
        (
            VALID.replace("\"/v1/charges\"", &format!("\"v1/{long}\"")),
            "7:25: routes[0].match.path_prefix: the path is 1048579 bytes long, more than \
             server.max_header_bytes (32768 bytes)",
        ),
        (
            VALID.replace("\"/v1/charges\"", &format!("\"v1/{}\"", &long[..1000])),
            "7:25: routes[0].match.path_prefix: \"v1/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\
             … (1003 bytes) must start with \"/\"",
        ),
        (
            VALID.replace("\"charges\"", &format!("\"{long}\"")),
            "5:8: routes[0].name: the name is 1048576 bytes long: at most 128 bytes",
        ),
        (
            format!("[defaults]\nretention = \"{long}\"\n{VALID}"),
            &format!(
                "2:13: defaults.retention: invalid duration \"{}\"… (1048576 bytes)",
                &long[..64]
            ),
        ),
    ] {
        let stderr = check_refuses(&path, file, said);
        assert!(stderr.len() < 1000, "{}", &stderr[..1000]);
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
}

/// A table key or a field name of 100 kB is part of the field's path in
/// the messages about it: the path shows its start, the line and column
/// where it is, and the output stays a few lines long.
#[test]
fn check_shortens_a_long_key_in_the_field_path() {
    let dir = TestDir::new("cli-long-keys");
    let path = dir.path("long.toml");
    let long = "u".repeat(100_000);
    let shown = "u".repeat(128);
    for (file, said) in [
        (
            format!("[upstreams.{long}]\nurl = \"ftp://x\"\n{VALID}"),
            format!("long.toml:1:1: upstreams.{shown}…: the name is 100000 bytes long"),
        ),
        (
            format!("[server]\n{long} = 1\n{VALID}"),
            format!(
                "long.toml:2:1: server.{shown}…: unknown field `{}`… (100000 bytes), expected",
                &long[..64]
            ),
        ),
    ] {
        let stderr = check_refuses(&path, file, &said);
        assert!(stderr.len() < 2000, "{}", &stderr[..2000]);
        assert!(stderr.contains(&said), "{said}: {stderr}");
    }
}

/// A DER CA file given where PEM is read (`store.redis.ca`, the Postgres
/// URL's `sslrootcert`) is said to be DER, with the conversion, as the
/// listener and upstream files are.
#[test]
fn check_names_a_der_store_ca_with_its_conversion() {
    let dir = TestDir::new("cli-check-der-store-ca");
    let path = dir.path("store.toml");
    let config = path.to_str().unwrap();
    let der = common::certs::Pki::new("store CA").write_ca_der(&dir, "ca.der");
    let conversion = "is DER (binary), not PEM; convert it: openssl x509 -inform der";
    let redis = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://postgres@127.0.0.1/test\"\n\
         [store.redis]\nurl = \"rediss://127.0.0.1:6379/7\"\nca = \"{}\"\n{VALID}",
        der.display()
    );
    let postgres = format!(
        "[store]\nbackend = \"postgres\"\n\
         url = \"postgres://app:hunter2@127.0.0.1/test?sslmode=verify-full&sslrootcert={}\"\n{VALID}",
        der.display()
    );
    for (file, field) in [
        (redis, "6:6: store.redis.ca:"),
        (postgres, "3:7: store.url:"),
    ] {
        let stderr = check_refuses(&path, file, "");
        assert!(stderr.contains(&format!("{config}:{field}")), "{stderr}");
        assert!(stderr.contains(&der.display().to_string()), "{stderr}");
        assert!(stderr.contains(conversion), "{stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
}

/// A command that writes the embedded store past a file-size limit
/// (`ulimit -f`, systemd's `LimitFSIZE`) fails in one line, exit 1, as on a
/// full disk: it was ended by SIGXFSZ, with a core dump and no word of why.
#[test]
fn a_file_size_limit_fails_a_command_in_one_line() {
    let dir = TestDir::new("cli-fsize");
    let path = dir.path("fsize.toml");
    let config = format!(
        "[store]\npath = \"{}\"\n{VALID}",
        dir.path("store.db").display()
    );
    std::fs::write(&path, config).unwrap();
    let out = Command::new("prlimit")
        .arg("--fsize=1")
        .arg(env!("CARGO_BIN_EXE_idemgate"))
        .args(["migrate", "-c", path.to_str().unwrap()])
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .expect("prlimit (util-linux) runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?}: {stderr}", out.status);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("idemgate migrate: "), "{stderr}");
}

/// A route name on the command line is said back in `keys`' messages: one
/// longer than any route can be named now (a paste gone wrong) is looked
/// up, and said by its start and length, not echoed whole. A name of the
/// longest length a route may have is named whole. The key and the cursor,
/// also given on the command line, are never echoed.
#[test]
fn keys_quotes_a_route_name_too_long_for_any_route_shortened() {
    let dir = TestDir::new("cli-long-route");
    let path = migrated_embedded_config(&dir);
    let config = path.to_str().unwrap();
    let long = "r".repeat(100_000);
    for args in [
        vec!["keys", "show", "-c", config, &long, "k1"],
        vec!["keys", "purge", "-c", config, &long, "k1"],
        vec!["keys", "list", "-c", config, &long],
    ] {
        let out = idemgate(&args);
        let stderr = text(&out.stderr);
        let what = &args[..2];
        assert_eq!(out.status.code(), Some(1), "{what:?}: {stderr}");
        assert!(stderr.len() < 400, "{what:?}: {} bytes", stderr.len());
        assert_eq!(stderr.lines().count(), 1, "{what:?}: {stderr}");
        assert!(
            stderr.contains(&format!("\"{}\"… (100000 bytes)", "r".repeat(64)))
                && stderr.starts_with("no records"),
            "{what:?}: {stderr}"
        );
        assert!(out.stdout.len() < 100, "{what:?}");
    }

    let longest = "r".repeat(128);
    let out = idemgate(&["keys", "show", "-c", config, &longest, "k1"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("no records"), "{stderr}");
    assert!(stderr.contains(&format!("{longest:?}")), "{stderr}");

    let long_key = "k".repeat(100_000);
    let out = idemgate(&["keys", "show", "-c", config, "charges", &long_key]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.len() < 200, "{stderr}");
    let long_cursor = "a".repeat(100_000);
    let out = idemgate(&[
        "keys",
        "list",
        "-c",
        config,
        "charges",
        "--after",
        &long_cursor,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.len() < 200, "{stderr}");
}

/// `VALID` on an embedded store of `dir`'s own, swept `batch` records at a
/// time, holding `expired` records whose retention has ended.
fn expired_backlog(dir: &TestDir, batch: u32, expired: u32) -> std::path::PathBuf {
    let path = dir.path("idemgate.toml");
    let store = dir.path("store.db");
    std::fs::write(
        &path,
        format!(
            "[store]\npath = \"{}\"\nsweep_batch = {batch}\n{VALID}",
            store.display()
        ),
    )
    .unwrap();
    let out = idemgate(&["migrate", "-c", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let conn = rusqlite::Connection::open(&store).unwrap();
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                              created_at, completed_at, expires_at)
         SELECT 'charges', 'scope-a', printf('k%08d', i), 1, 'fp', i, 201, x'7b7d',
                ?2 - 120000, ?2 - 120000, ?2 - 60000
         FROM n",
        rusqlite::params![expired, now],
    )
    .unwrap();
    path
}

fn records_in(store: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(store).unwrap();
    conn.query_row("SELECT count(*) FROM records", [], |row| row.get(0))
        .unwrap()
}

/// `sweep` deletes a batch at a time, each its own transaction. A SIGINT or
/// SIGTERM stops it between two batches: it prints what it deleted so far,
/// as a finished sweep prints it, says on stderr that it was interrupted,
/// and exits 128 + the signal's number, as a shell reports a process the
/// signal ended. The count printed is what left the file.
#[test]
fn an_interrupted_sweep_prints_what_it_deleted() {
    const EXPIRED: u32 = 200_000;
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let dir = TestDir::new("cli-sweep-signal");
        let config = expired_backlog(&dir, 20, EXPIRED);
        let store = dir.path("store.db");
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["sweep", "-c", config.to_str().unwrap()])
            .env_remove("IDEMGATE_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Under way: some batches deleted, most of the backlog left.
        let started = std::time::Instant::now();
        while records_in(&store) == i64::from(EXPIRED) {
            assert!(started.elapsed() < std::time::Duration::from_secs(20));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        common::gateway::send_signal(child.id(), signal);
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{signal}: {stderr}");
        let left = records_in(&store);
        assert!(left > 0, "{signal}: the sweep finished before the signal");
        let deleted = i64::from(EXPIRED) - left;
        assert_eq!(
            text(&out.stdout),
            format!("{deleted} expired records deleted\n"),
            "{signal}"
        );
        assert!(
            stderr.contains(&format!("interrupted by SIG{signal}")),
            "{signal}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{signal}: {stderr}");
    }
}

/// Another process holding the embedded file in a write transaction (a
/// `compact` rewriting it, another command, a `sqlite3` shell) makes a
/// command's write wait 5 s, then fail: the message names the likely
/// holders and what to do, not only SQLite's "database is locked".
#[test]
fn a_store_file_held_by_another_writer_is_said_with_what_to_do() {
    let dir = TestDir::new("cli-store-locked");
    let config = expired_backlog(&dir, 1000, 10);
    let config = config.to_str().unwrap();
    let holder = rusqlite::Connection::open(dir.path("store.db")).unwrap();
    // One record that still stands, for `keys purge`.
    holder
        .execute_batch(
            "INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                                  created_at, completed_at, expires_at)
             SELECT 'charges', 'scope-a', 'standing', 1, 'fp', 11, 201, x'7b7d',
                    created_at, completed_at, expires_at + 86400000
             FROM records LIMIT 1",
        )
        .unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    for args in [
        vec!["sweep", "-c", config],
        vec!["keys", "purge", "-c", config, "charges", "standing"],
    ] {
        let out = idemgate(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains("database is locked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("idemgate compact") && stderr.contains("run this again"),
            "{args:?}: {stderr}"
        );
    }
    holder.execute_batch("ROLLBACK").unwrap();
    let out = idemgate(&["sweep", "-c", config]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "10 expired records deleted\n");
}

/// A SIGINT or SIGTERM during `compact` stops the rewrite (one SQLite
/// transaction, rolled back): the command says it was stopped and that the
/// file is as it was, and exits 128 + the signal's number, as `sweep`
/// does. The file is whole, every record in it, and a compact run again
/// rewrites it.
#[test]
fn a_signal_during_compact_stops_it_and_leaves_the_file_as_it_was() {
    const RECORDS: i64 = 30_000;
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let dir = TestDir::new("cli-compact-signal");
        let path = embedded_config(&dir);
        let config = path.to_str().unwrap();
        let out = idemgate(&["migrate", "-c", config]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let store = dir.path("store.db");
        let conn = rusqlite::Connection::open(&store).unwrap();
        conn.execute_batch(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                                  created_at, completed_at, expires_at)
             SELECT 'charges', 'scope-a', 'k' || i, 1, 'fp', i, 201, randomblob(1000),
                    1, 1, 9999999999999
             FROM n;
             DELETE FROM records WHERE token > {RECORDS};
             PRAGMA wal_checkpoint(TRUNCATE);",
            2 * RECORDS
        ))
        .unwrap();
        drop(conn);
        let size = std::fs::metadata(&store).unwrap().len();
        // Taken by `compact` before it opens the file; no command before it
        // took it.
        let lock = dir.path("store.db-lock");
        assert!(!lock.exists());
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["compact", "-c", config])
            .env_remove("IDEMGATE_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Under way: the rewrite about to begin or begun. Its last step,
        // the copy into the file, is the only one a signal does not stop;
        // it begins only once the file's records have been read whole.
        let started = std::time::Instant::now();
        while !lock.exists() {
            assert!(started.elapsed() < std::time::Duration::from_secs(20));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        common::gateway::send_signal(child.id(), signal);
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{signal}: {stderr}{}",
            text(&out.stdout)
        );
        assert!(out.stdout.is_empty(), "{signal}: {}", text(&out.stdout));
        assert_eq!(stderr.lines().count(), 1, "{signal}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "idemgate compact: interrupted by SIG{signal}: stopped before the rewrite ended"
            )) && stderr.contains("the file is as it was"),
            "{signal}: {stderr}"
        );
        let conn = rusqlite::Connection::open(&store).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok", "{signal}");
        let (count, bytes): (i64, i64) = conn
            .query_row(
                "SELECT count(*), sum(length(body)) FROM records",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((count, bytes), (RECORDS, RECORDS * 1000), "{signal}");
        drop(conn);
        assert_eq!(std::fs::metadata(&store).unwrap().len(), size, "{signal}");
        let out = idemgate(&["compact", "-c", config]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&format!("{size} bytes before")),
            "{}",
            text(&out.stdout)
        );
        let out = idemgate(&["keys", "show", "-c", config, "charges", "k1"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// A table key or a field name the file writes with control characters
/// (TOML escapes: `\n`, `\u001b`) is quoted back escaped, in the field's
/// path, in serde's "unknown field" and in the list of defined upstreams:
/// `check` prints one line per problem and no terminal escape sequence,
/// and `serve` its one line.
#[test]
fn check_escapes_control_characters_of_table_keys() {
    let dir = TestDir::new("cli-control-keys");
    let path = dir.path("controls.toml");
    let names = "[upstreams.\"a\\u001b[31mb\\nX\"]\nurl = \"http://127.0.0.1:3000\"\n\n\
         [[routes]]\nname = \"r\"\nupstream = \"nope\"\nmatch = { path_prefix = \"/x\" }\n"
        .to_owned();
    let field = format!("[server]\n\"s\\u001b]0;t\\u0007\" = 1\n{VALID}");
    for (file, problems, said) in [
        (
            names,
            2,
            &[
                "controls.toml:1:1: upstreams.a\\u{1b}[31mb\\nX: \"a\\u{1b}[31mb\\nX\" is not a valid name",
                "routes[0].upstream: unknown upstream \"nope\" (defined: a\\u{1b}[31mb\\nX)",
            ][..],
        ),
        (
            field,
            1,
            &["controls.toml:2:1: server.s\\u{1b}]0;t\\u{7}: unknown field `s\\u{1b}]0;t\\u{7}`"][..],
        ),
    ] {
        let stderr = check_refuses(&path, &file, said[0]);
        for said in said {
            assert!(stderr.contains(said), "{said}: {stderr}");
        }
        assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
        assert_eq!(stderr.trim_end().lines().count(), problems, "{stderr}");
        let out = idemgate(&["serve", "-c", path.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
    }
}

/// IPv6 addresses in `listen`, an upstream's `url` and a region's
/// `gateway`: what `check` takes, and for what it refuses, a message that
/// says what is wrong with the address. An upstream URL is refused when its
/// brackets hold anything but an IPv6 address (`[127.0.0.1]`, a name, an
/// `IPvFuture`, nothing) or a zone, or when something other than a port
/// follows them: `serve` could dial none of them, and would send each to the
/// upstream in `Host`.
#[test]
fn check_says_what_is_wrong_with_an_ipv6_address() {
    let dir = TestDir::new("cli-ipv6");
    let path = dir.path("ipv6.toml");
    let with = |listen: &str, url: &str, gateway: &str| {
        format!(
            "[server]\nlisten = \"{listen}\"\nadmin_listen = \"[::1]:9\"\n\
             [store]\npath = \"{}\"\n\
             [upstreams.api]\nurl = \"{url}\"\n\
             [[routes]]\nname = \"charges\"\nupstream = \"api\"\nmatch = {{ path = \"/v1\" }}\n\
             [region]\nname = \"eu\"\ntoken_env = \"IDEMGATE_TEST_IPV6_REGION_TOKEN\"\n\
             [regions.eu]\ngateway = \"http://[2001:db8::1]:8443\"\n\
             [regions.us]\ngateway = \"{gateway}\"\n",
            dir.path("store.db").display()
        )
    };
    let token = "a-region-token-of-enough-length-0123456789";
    let check = |file: String| {
        std::fs::write(&path, file).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check", "-c", path.to_str().unwrap()])
            .env_remove("IDEMGATE_CONFIG")
            .env("IDEMGATE_TEST_IPV6_REGION_TOKEN", token)
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };

    for (listen, url, gateway) in [
        ("[::1]:8080", "http://[::1]:3000", "https://[2001:db8::2]"),
        (
            "[::]:8080",
            "https://[2001:db8::1]/",
            "http://[::ffff:192.0.2.1]:80",
        ),
        (
            "[fe80::1%2]:8080",
            "http://[2001:DB8::A]:3000",
            "http://[::1]:8443/",
        ),
    ] {
        let (code, stderr) = check(with(listen, url, gateway));
        assert_eq!(code, Some(0), "{listen} {url} {gateway}: {stderr}");
    }

    let good = ("[::1]:8080", "http://[::1]:3000", "http://[::1]:8443");
    for (listen, words) in [
        ("::1:8080", "in brackets"),
        ("fe80::1%2:8080", "in brackets"),
        ("[fe80::1%eth0]:8080", "interface's number"),
        ("[::1]", "no port"),
        ("127.0.0.1", "no port"),
    ] {
        let (code, stderr) = check(with(listen, good.1, good.2));
        assert_eq!(code, Some(1), "{listen}: {stderr}");
        assert!(
            stderr.contains("ipv6.toml:2:10: server.listen:"),
            "{listen}: {stderr}"
        );
        assert!(stderr.contains(words), "{listen}: {stderr}");
    }
    for (url, words) in [
        ("http://::1:3000", "in brackets"),
        ("http://2001:db8::1/", "in brackets"),
        ("http://[127.0.0.1]:3000", "not an IPv6 address"),
        ("http://[localhost]:3000", "not an IPv6 address"),
        ("http://[v1.x]:3000", "not an IPv6 address"),
        ("http://[]:3000", "not an IPv6 address"),
        ("http://[::1]x:3000", "after the brackets"),
        ("http://[fe80::1%25eth0]:3000", "zone"),
        ("http://[fe80::1%eth0]:3000", "zone"),
    ] {
        let (code, stderr) = check(with(good.0, url, good.2));
        assert_eq!(code, Some(1), "{url}: {stderr}");
        assert!(
            stderr.contains("ipv6.toml:7:7: upstreams.api.url:"),
            "{url}: {stderr}"
        );
        assert!(stderr.contains(words), "{url}: {stderr}");
        let (code, stderr) = check(with(good.0, good.1, url));
        assert_eq!(code, Some(1), "{url}: {stderr}");
        assert!(stderr.contains("regions.us.gateway:"), "{url}: {stderr}");
        assert!(stderr.contains(words), "{url}: {stderr}");
    }
}

/// Two regions at one gateway address are refused (docs/multi-region.md)
/// however the address is spelt: an IPv6 address has many spellings
/// (`[::1]`, `[0:0::1]`, `[::0001]`), and an IPv4-mapped one
/// (`[::ffff:10.0.0.1]`) is dialed at its IPv4 address.
#[test]
fn check_refuses_two_regions_at_one_ip_address_however_it_is_written() {
    let dir = TestDir::new("cli-region-ip");
    let path = dir.path("regions.toml");
    let with = |eu: &str, us: &str| {
        format!(
            "[store]\npath = \"{}\"\n\
             [upstreams.api]\nurl = \"http://[::1]:3000\"\n\
             [[routes]]\nname = \"charges\"\nupstream = \"api\"\nmatch = {{ path = \"/v1\" }}\n\
             [region]\nname = \"eu\"\ntoken_env = \"IDEMGATE_TEST_REGION_IP_TOKEN\"\n\
             [regions.eu]\ngateway = \"{eu}\"\n\
             [regions.us]\ngateway = \"{us}\"\n",
            dir.path("store.db").display()
        )
    };
    let check = |file: String| {
        std::fs::write(&path, file).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["check", "-c", path.to_str().unwrap()])
            .env_remove("IDEMGATE_CONFIG")
            .env(
                "IDEMGATE_TEST_REGION_IP_TOKEN",
                "a-region-token-of-enough-length-0123456789",
            )
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    for (eu, us) in [
        ("http://[::1]:8443", "http://[0:0::1]:8443"),
        (
            "http://[2001:db8::a]:8443",
            "http://[2001:0DB8:0:0::000A]:8443/",
        ),
        ("https://[::ffff:10.0.0.1]", "https://10.0.0.1:443"),
    ] {
        let (code, stderr) = check(with(eu, us));
        assert_eq!(code, Some(1), "{eu} {us}: {stderr}");
        assert!(
            stderr.contains("regions.us.gateway: regions.eu.gateway has the same address"),
            "{eu} {us}: {stderr}"
        );
    }
    for (eu, us) in [
        ("http://[::1]:8443", "http://[::2]:8443"),
        ("http://[::1]:8443", "http://127.0.0.1:8443"),
        ("http://[::1]:8443", "https://[::1]:8443"),
    ] {
        let (code, stderr) = check(with(eu, us));
        assert_eq!(code, Some(0), "{eu} {us}: {stderr}");
    }
}

/// An argument clap refuses (a value outside `--state`'s or `--log-format`'s
/// names, a `--limit` that is no number, a `--log-level` that is no filter,
/// an unknown flag or subcommand) is said back by its start and its length
/// when long, its control characters escaped: the refusal stays a few
/// lines that name the flag, whatever was pasted.
#[test]
fn a_long_refused_argument_is_quoted_by_its_start_and_length() {
    let long = "s".repeat(100_000);
    let flag_long = format!("--{}", &long[2..]);
    let cases: [(&str, Vec<&str>); 6] = [
        ("--state", vec!["keys", "list", "charges", "--state", &long]),
        ("--limit", vec!["keys", "list", "charges", "--limit", &long]),
        ("--log-level", vec!["--log-level", &long, "check"]),
        ("--log-format", vec!["--log-format", &long, "check"]),
        ("unexpected argument", vec!["check", &flag_long]),
        ("unrecognized subcommand", vec![&long]),
    ];
    for (names, args) in cases {
        let out = idemgate(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{names}: {}", start_of(&stderr));
        assert!(stderr.len() < 300, "{names}: {}", start_of(&stderr));
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{names}: {stderr}");
        assert!(
            errors[0].contains(names) && errors[0].contains("… (100000 bytes)"),
            "{names}: {stderr}"
        );
    }
    // `RUST_LOG` stands in for `--log-level`, refused in the same words.
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check"])
        .env_remove("IDEMGATE_CONFIG")
        .env("RUST_LOG", &long)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", start_of(&stderr));
    assert!(stderr.len() < 300, "{}", start_of(&stderr));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("RUST_LOG") && stderr.contains("… (100000 bytes)"),
        "{stderr}"
    );
    // Short values are said whole, as clap says them, but escaped.
    for (names, value) in [("--state", "done"), ("--state", "in_flight\u{1b}[31m\n")] {
        let out = idemgate(&["keys", "list", "charges", "--state", value]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: invalid value '"), "{stderr}");
        assert!(first.contains(names), "{stderr}");
        assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
        assert!(
            first.contains(&value.escape_debug().to_string()),
            "{value:?}: {stderr:?}"
        );
    }
}

/// A `-c` file that cannot be read (missing, a directory, a path too long
/// for the system) is named in the one line that says so, shortened to its
/// start and its length when long, by every command that reads it.
#[test]
fn an_unreadable_config_path_is_named_shortened() {
    let dir = TestDir::new("cli-unreadable-config");
    // A directory 3000 bytes deep, and a file missing under it.
    let mut deep = dir.path("");
    for _ in 0..15 {
        deep.push("d".repeat(200));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let deep_dir = deep.to_str().unwrap().to_owned();
    let deep_missing = format!("{deep_dir}/idemgate.toml");
    let too_long = "p".repeat(100_000);
    for (path, why) in [
        (deep_dir.as_str(), "Is a directory"),
        (deep_missing.as_str(), "No such file"),
        (too_long.as_str(), "File name too long"),
    ] {
        let bytes = format!("… ({} bytes)", path.len());
        for (args, code) in [
            (vec!["check", "-c", path], 1),
            (vec!["migrate", "-c", path], 1),
            (vec!["sweep", "-c", path], 1),
            (vec!["compact", "-c", path], 1),
            (vec!["keys", "show", "-c", path, "charges", "k1"], 1),
            (vec!["keys", "list", "-c", path, "charges"], 1),
            (vec!["serve", "-c", path], 64),
        ] {
            let out = idemgate(&args);
            let stderr = text(&out.stderr);
            let what = format!("{} on {why}", args[0]);
            assert_eq!(
                out.status.code(),
                Some(code),
                "{what}: {}",
                start_of(&stderr)
            );
            assert!(stderr.len() < 300, "{what}: {}", start_of(&stderr));
            assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
            assert!(
                stderr.contains(&bytes) && stderr.contains(why),
                "{what}: {stderr}"
            );
        }
    }
    // A path of an ordinary length is named whole.
    let missing = dir.path("missing.toml");
    let out = idemgate(&["check", "-c", missing.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!("{}: cannot read the file: ", missing.display())),
        "{stderr}"
    );
}

/// The first 400 characters of `text` and its length: a failure's message
/// about a long output.
fn start_of(text: &str) -> String {
    let start: String = text.chars().take(400).collect();
    format!("{start:?}… ({} bytes)", text.len())
}

/// Records stored under a route name longer than a route may have now
/// (128 bytes; an older build took longer names) are listed, shown and
/// purged by `keys` as the admin API reaches them: the cap is on the file's
/// names, not on looking a stored name up. Messages about such a name say
/// it by its start and its length, on one line.
#[test]
fn keys_reaches_records_under_a_route_name_longer_than_names_are_now() {
    let dir = TestDir::new("cli-long-stored-route");
    let path = migrated_embedded_config(&dir);
    let config = path.to_str().unwrap();
    let route = "r".repeat(200);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    rusqlite::Connection::open(dir.path("store.db"))
        .unwrap()
        .execute(
            "INSERT INTO records (route, scope, key, state, fingerprint, token, status, body,
                                  created_at, completed_at, expires_at)
             VALUES (?1, 'scope-a', 'k1', 1, 'fp', 1, 201, x'7b7d', ?2, ?2, ?2 + 86400000)",
            rusqlite::params![route, now],
        )
        .unwrap();

    let out = idemgate(&["keys", "list", "-c", config, &route]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        start_of(&text(&out.stderr))
    );
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page["records"][0]["key"], "k1", "{page}");
    let out = idemgate(&["keys", "show", "-c", config, &route, "k1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        start_of(&text(&out.stderr))
    );
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown.as_array().map(Vec::len), Some(1), "{shown}");
    let out = idemgate(&["keys", "purge", "-c", config, &route, "k1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        start_of(&text(&out.stderr))
    );
    assert_eq!(text(&out.stdout), "1 record deleted\n");

    let shortened = format!("\"{}\"… (200 bytes)", "r".repeat(64));
    for args in [
        vec!["keys", "show", "-c", config, &route, "k1"],
        vec!["keys", "purge", "-c", config, &route, "k1"],
        vec!["keys", "list", "-c", config, &route],
    ] {
        let out = idemgate(&args);
        let stderr = text(&out.stderr);
        let what = &args[..2];
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what:?}: {}",
            start_of(&stderr)
        );
        assert!(stderr.len() < 400, "{what:?}: {}", start_of(&stderr));
        assert_eq!(stderr.lines().count(), 1, "{what:?}: {stderr}");
        assert!(
            stderr.starts_with("no records") && stderr.contains(&shortened),
            "{what:?}: {stderr}"
        );
        assert!(!stderr.contains(&route), "{what:?}: {stderr}");
    }
}

//! TLS on every hop the gateway makes or serves besides the data plane: the
//! admin plane (`[admin.tls]`), Redis (`rediss://`) and Postgres
//! (`sslmode=verify-full`). Redis and PostgreSQL are real servers the tests
//! start with certificates they make; a missing binary fails the test and
//! says what to install.

mod common;
mod pg_support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::admin::TOKEN_ENV;
use common::certs::{Identity, Pki};
use common::config::{Config, Route, Store, Tls, Upstream};
use common::gateway::free_port;
use common::tls_client::{TlsClient, send, tls_client};
use common::{GatewayProcess, MockUpstream, TestDir};
use pg_support::{RedisPrefix, TestSchema};

const TOKEN: &str = "tls-hops-admin-token-0123456789";

/// GET over TLS: the status, or the error (a refused handshake).
async fn get(client: &TlsClient, port: u16, path: &str) -> Result<u16, String> {
    let auth = common::admin::bearer(TOKEN);
    let reply = send(client, "GET", port, path, &[("authorization", &auth)], b"").await?;
    Ok(reply.status)
}

/// Whether the port answers a plain HTTP request with an HTTP status line.
fn answers_plain_http(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).unwrap_or(0);
    buf[..n].starts_with(b"HTTP/1.1 200")
}

/// The admin plane over TLS as `server`, asking for client certificates
/// signed by `client_ca` when given.
fn admin_config(server: &Identity, client_ca: Option<&Path>) -> Config {
    let tls = match client_ca {
        Some(ca) => Tls::of(server).client_ca(ca),
        None => Tls::of(server),
    };
    Config::new()
        .server("shutdown_grace", "1s")
        .admin_token_env(TOKEN_ENV)
        .admin_tls(tls)
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"))
}

#[tokio::test]
async fn admin_plane_over_tls_without_client_certificates() {
    let pki = Pki::new("admin CA");
    let dir = TestDir::new("admin-tls");
    let server = pki.server(&dir, "admin");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &admin_config(&server, None),
        &[(TOKEN_ENV, TOKEN)],
    );
    let port = gateway.admin.port();
    let client = tls_client(&pki.ca_pem(), None, false);
    assert_eq!(get(&client, port, "/healthz").await, Ok(200));
    assert_eq!(
        get(&client, port, "/admin/keys/charges/none").await,
        Ok(404)
    );
    assert!(!answers_plain_http(port), "plain HTTP must not be served");
    // A client that does not trust the gateway's CA gets nowhere.
    let stranger = tls_client(&Pki::new("other CA").ca_pem(), None, false);
    assert!(get(&stranger, port, "/healthz").await.is_err());
}

#[tokio::test]
async fn admin_plane_over_tls_with_client_certificates_and_reloaded_certificates() {
    let pki = Pki::new("admin CA");
    let dir = TestDir::new("admin-mtls");
    let server = pki.server(&dir, "admin");
    let clients = Pki::new("operators CA");
    let client_ca = clients.write_ca(&dir, "operators.pem");
    let operator = clients.client(&dir, "operator");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &admin_config(&server, Some(&client_ca)),
        &[(TOKEN_ENV, TOKEN)],
    );
    let port = gateway.admin.port();
    let with_cert = tls_client(&pki.ca_pem(), Some(&operator), false);
    assert_eq!(get(&with_cert, port, "/healthz").await, Ok(200));
    assert_eq!(
        get(&with_cert, port, "/admin/keys/charges/none").await,
        Ok(404)
    );
    let without = tls_client(&pki.ca_pem(), None, false);
    assert!(
        get(&without, port, "/healthz").await.is_err(),
        "a client without a certificate must be refused"
    );
    let foreign = Pki::new("someone else").client(&dir, "intruder");
    let with_foreign = tls_client(&pki.ca_pem(), Some(&foreign), false);
    assert!(get(&with_foreign, port, "/healthz").await.is_err());
    // Both counted, as the data plane's are, and said in the log.
    let metrics = send(&with_cert, "GET", port, "/metrics", &[], b"")
        .await
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        metrics.contains(
            "idemgate_tls_refused_total{listener=\"admin\",reason=\"client_certificate\"} 2"
        ),
        "{metrics}"
    );
    // Written after the client saw its handshake refused and after the
    // count: waited for.
    let line = gateway
        .logged_line("client certificate refused", Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("not logged:\n{}", gateway.log_text()));
    assert!(line.contains("listener=\"admin\""), "{line}");

    // The certificate replaced on disk, then a reload: new connections get
    // the new one (signed by another CA, so the old trust no longer works).
    let renewed_pki = Pki::new("renewed admin CA");
    let renewed = renewed_pki.server(&dir, "renewed");
    std::fs::copy(&renewed.cert, &server.cert).unwrap();
    std::fs::copy(&renewed.key, &server.key).unwrap();
    gateway.signal("HUP");
    let renewed_client = tls_client(&renewed_pki.ca_pem(), Some(&operator), false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&renewed_client, port, "/healthz").await != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "the admin certificate was not reloaded:\n{}",
            gateway.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let old_trust = tls_client(&pki.ca_pem(), Some(&operator), false);
    assert!(get(&old_trust, port, "/healthz").await.is_err());
}

/// A child process killed (and reaped) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited at start ({status}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Redis serving TLS only, on a free port, with the given certificate.
fn start_tls_redis(dir: &TestDir, server: &Identity, ca: &Path) -> (Running, u16) {
    let port = free_port().port();
    let log = dir.path("redis.log");
    let child = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(&server.cert)
        .arg("--tls-key-file")
        .arg(&server.key)
        .arg("--tls-ca-cert-file")
        .arg(ca)
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir.0)
        .arg("--logfile")
        .arg(&log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("redis-server is needed (apt-get install redis-server, built with TLS): {e}")
        });
    let mut running = Running(child);
    wait_for_port(
        port,
        &mut running.0,
        "redis-server (is it built with TLS?)",
        &log,
    );
    (running, port)
}

fn cache_lookups(metrics: &str, result: &str) -> u64 {
    let series = format!("idemgate_cache_lookups_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Postgres at `pg_url`; Redis over TLS at `redis_port`, trusting `ca`
/// when given (else the platform's roots).
fn redis_tls_config(pg_url: &str, redis_port: u16, prefix: &str, ca: Option<&Path>) -> Config {
    let url = format!("rediss://localhost:{redis_port}");
    let mut store = Store::postgres(pg_url)
        .set("pool_size", 4)
        .redis(&url, prefix);
    if let Some(ca) = ca {
        store = store.redis_set("ca", ca);
    }
    Config::new()
        .server("shutdown_grace", "1s")
        .store(store)
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_carries_the_fast_path_and_refuses_an_untrusted_server() {
    let pki = Pki::new("redis CA");
    let dir = TestDir::new("rediss");
    let server = pki.server(&dir, "redis");
    let ca = pki.write_ca(&dir, "redis-ca.pem");
    let (_redis, redis_port) = start_tls_redis(&dir, &server, &ca);
    let upstream = MockUpstream::start().await;
    for trusted in [true, false] {
        let schema = TestSchema::create().await;
        let prefix = RedisPrefix::new("rediss");
        // Untrusted: the platform's roots, which do not know this CA.
        let trust = trusted.then_some(ca.as_path());
        let template = redis_tls_config(&schema.url(), redis_port, &prefix.0, trust);
        let run = TestDir::new("rediss-gateway");
        let gateway = GatewayProcess::start_with_env(
            &run,
            &upstream.url(),
            &template,
            &[("RUST_LOG", "info,idemgate::store=debug")],
        );
        let client = gateway.client();
        // Distinct keys: a key's first replay is the one that asks Redis
        // (later ones are served from memory). The first TLS connection may
        // miss the cache's short deadline on a loaded machine: try a while.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut metrics = String::new();
        for n in 0.. {
            let key = format!("tls-{trusted}-{n}");
            let first = client.post("/v1/charges", Some(&key), "{}").await;
            assert_eq!(first.status, 201, "{}", first.text());
            let replay = client.post("/v1/charges", Some(&key), "{}").await;
            assert_eq!(replay.header("idempotent-replayed"), Some("true"));
            assert_eq!(upstream.executions(&key), 1);
            metrics = gateway.admin_client().get("/metrics").await.text();
            if cache_lookups(&metrics, "hit") > 0 || Instant::now() > deadline || n >= 5 && !trusted
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (hits, errors) = (
            cache_lookups(&metrics, "hit"),
            cache_lookups(&metrics, "error"),
        );
        if trusted {
            assert!(
                hits >= 1,
                "no replay came from Redis over TLS:\n{metrics}\n{}",
                gateway.log_text()
            );
        } else {
            assert_eq!(hits, 0, "an unverified Redis was used");
            assert!(errors >= 1, "{metrics}");
            // Said as it is, not as a Redis too slow to answer.
            let log = gateway.log_text();
            assert!(log.contains("invalid peer certificate"), "{log}");
        }
    }
}

/// A PostgreSQL cluster of its own with `ssl = on`, in a temporary
/// directory, stopped on drop. Run as the `postgres` user when the tests
/// run as root (initdb refuses root).
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
}

fn postgres_bin() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .find(|bin| bin.join("initdb").exists());
    found.unwrap_or_else(|| {
        panic!("PostgreSQL server binaries are needed in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// `program args` as the `postgres` user when root, else as is.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(mut command: Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    fn start(dir: &TestDir, server: &Identity) -> Cluster {
        let bin = postgres_bin();
        let data = dir.path("pgdata");
        std::fs::create_dir_all(&data).unwrap();
        if is_root() {
            // The directories above must be traversable by postgres too.
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["-R", "postgres:postgres"]).arg(&dir.0);
                    c
                },
                "chown",
            );
        }
        let mut initdb = as_postgres(&bin.join("initdb"));
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data);
        run(initdb, "initdb");
        for (from, to) in [(&server.cert, "server.crt"), (&server.key, "server.key")] {
            std::fs::copy(from, data.join(to)).unwrap();
        }
        run(
            {
                let mut c = Command::new("chmod");
                c.arg("600").arg(data.join("server.key"));
                c
            },
            "chmod",
        );
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["postgres:postgres"])
                        .arg(data.join("server.crt"))
                        .arg(data.join("server.key"));
                    c
                },
                "chown",
            );
        }
        let port = free_port().port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c ssl=on -c unix_socket_directories={} -c fsync=off",
            data.display()
        );
        let mut pg_ctl = as_postgres(&bin.join("pg_ctl"));
        pg_ctl
            .args(["-w", "-t", "30", "-o", &options, "-l"])
            .arg(data.join("log"))
            .arg("-D")
            .arg(&data)
            .arg("start");
        run(pg_ctl, "pg_ctl start");
        Cluster { bin, data, port }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut stop = as_postgres(&self.bin.join("pg_ctl"));
        stop.args(["-m", "immediate", "-D"])
            .arg(&self.data)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = stop.status();
    }
}

fn migrate(dir: &TestDir, url: &str) -> (bool, String) {
    let config = dir.path(&format!("migrate-{}.toml", url.len()));
    std::fs::write(
        &config,
        format!(
            "[store]\nbackend = \"postgres\"\nurl = \"{url}\"\nconnect_timeout = \"5s\"\n\n\
             [upstreams.api]\nurl = \"http://127.0.0.1:9\"\n\n\
             [[routes]]\nname = \"r\"\nupstream = \"api\"\nmatch = {{ path_prefix = \"/\" }}\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["migrate", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn postgres_verify_full_checks_the_ca_and_the_host_name() {
    let pki = Pki::new("postgres CA");
    let dir = TestDir::new("pg-verify-full");
    let server = pki.server(&dir, "postgres");
    let ca = pki.write_ca(&dir, "pg-ca.pem");
    let cluster = Cluster::start(&dir, &server);
    let port = cluster.port;
    let ca_param = ca.display().to_string();

    // The right name, the right CA: connected, migrated.
    let right = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca_param}"
    );
    let (ok, text) = migrate(&dir, &right);
    assert!(ok, "{text}");

    // A name the certificate does not carry (the same server, reached by
    // address): refused.
    let wrong_name = format!(
        "postgres://postgres@wrong-name.invalid:{port}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca_param}"
    );
    let (ok, text) = migrate(&dir, &wrong_name);
    assert!(!ok, "a wrong host name was accepted: {text}");
    assert!(
        text.to_lowercase().contains("certificate"),
        "the refusal should say why: {text}"
    );

    // Another CA: refused.
    let other_ca = Pki::new("other CA").write_ca(&dir, "other-ca.pem");
    let wrong_ca = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        other_ca.display()
    );
    let (ok, text) = migrate(&dir, &wrong_ca);
    assert!(!ok, "an unknown CA was accepted: {text}");

    // And the gateway serves over it.
    let upstream = MockUpstream::start().await;
    let template = Config::new()
        .server("shutdown_grace", "1s")
        .store(Store::postgres(&right).set("pool_size", 2))
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let gateway =
        GatewayProcess::start(&TestDir::new("pg-tls-gateway"), &upstream.url(), &template);
    let client = gateway.client();
    assert_eq!(
        client.post("/v1/charges", Some("k"), "{}").await.status,
        201
    );
    let replay = client.post("/v1/charges", Some("k"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.executions("k"), 1);
}

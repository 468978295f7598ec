//! TLS on the listener (h1 and h2 by ALPN, mTLS, scope by client certificate,
//! certificates re-read on reload) and to https upstreams with a private CA.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::admin::TOKEN_ENV;
use common::certs::{Identity, Pki};
use common::config::{Config, Route, Tls, Upstream, raw};
use common::tls_client::{TlsClient, TlsReply, send, tls_client};
use common::{GatewayProcess, MockUpstream, TestDir};
use http::Version;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

async fn post(client: &TlsClient, port: u16, path: &str, key: &str) -> Result<TlsReply, String> {
    let headers = [
        ("idempotency-key", key),
        ("content-type", "application/json"),
    ];
    send(client, "POST", port, path, &headers, b"{}").await
}

/// The embedded store, `charges` keyed, `rest` plain; keys scoped by
/// `scope` (a TOML array).
fn plain(scope: &str) -> Config {
    Config::new()
        .upstream(Upstream::api().timeout("2s"))
        .defaults("lock_timeout", "5s")
        .defaults("scope", raw(scope))
        .route(Route::api("charges", "/v1/charges"))
        .route(Route::api("rest", "/").plain())
}

/// `plain` served over TLS as `server`, asking for client certificates
/// signed by `client_ca` when given.
fn config(server: &Identity, client_ca: Option<&std::path::Path>, scope: &str) -> Config {
    let tls = match client_ca {
        Some(ca) => Tls::of(server).client_ca(ca),
        None => Tls::of(server),
    };
    plain(scope).server_tls(tls)
}

/// A gateway on the embedded store with one route to an https upstream
/// `api`, as `upstream` makes it of `[upstreams.api]` with `timeout = "2s"`.
fn https_upstream_config(upstream: impl FnOnce(Upstream) -> Upstream) -> Config {
    Config::new()
        .upstream(upstream(Upstream::api().timeout("2s")))
        .defaults("lock_timeout", "5s")
        .route(Route::api("charges", "/"))
}

#[tokio::test]
async fn tls_listener_speaks_http1_and_h2_by_alpn() {
    let dir = TestDir::new("tls-alpn");
    let pki = Pki::new("test CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&server, None, "[]"));
    let port = gateway.addr.port();

    let h1 = post(&tls_client(&pki.ca_pem(), None, false), port, "/echo", "x")
        .await
        .unwrap();
    assert_eq!(h1.status, 200);
    assert_eq!(h1.version, Version::HTTP_11);
    let echo: serde_json::Value = serde_json::from_slice(&h1.body).unwrap();
    assert_eq!(echo["headers"]["x-forwarded-proto"], "https");

    let h2 = post(
        &tls_client(&pki.ca_pem(), None, true),
        port,
        "/v1/charges",
        "k",
    )
    .await
    .unwrap();
    assert_eq!(h2.status, 201);
    assert_eq!(h2.version, Version::HTTP_2);
}

/// A plain HTTP request sent to the TLS port gets a 400 problem it can
/// read, not a TLS alert its client shows as garbage; TLS goes on as before.
#[tokio::test]
async fn plain_http_on_the_tls_port_is_a_readable_400() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-plain-http");
    let pki = Pki::new("test CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&server, None, "[]"));
    let port = gateway.addr.port();

    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    stream
        .write_all(b"GET /echo HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .expect("the connection is closed after the answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("speaks HTTPS"), "{answer}");
    assert_eq!(upstream.total(), 0);

    let reply = post(&tls_client(&pki.ca_pem(), None, false), port, "/echo", "x")
        .await
        .unwrap();
    assert_eq!(reply.status, 200);

    let forwarded = upstream.total();
    // HTTP/2 in clear (prior knowledge, as `curl --http2-prior-knowledge`
    // sends it) is plain HTTP too: its client reads the 400 as HTTP/2, not
    // an HTTP/1 answer it shows as an empty reply.
    let mut client = common::h2::connect(gateway.addr).await;
    let request = http::Request::get(format!("http://localhost:{port}/echo"))
        .body(())
        .unwrap();
    let answer = common::h2::send(&mut client, request).await;
    assert_eq!(answer.status(), 400);
    assert_eq!(answer.headers()["content-type"], "application/problem+json");
    let body = String::from_utf8(common::h2::body(answer).await).unwrap();
    assert!(body.contains("speaks HTTPS"), "{body}");
    assert_eq!(upstream.total(), forwarded);
}

/// A plain HTTP client that goes on sending after its 400 (a body it was
/// sending) is read on for a while, as after any answer, but on SIGTERM
/// for 0.5 s more at most: it does not hold the process's exit for the
/// whole `shutdown_grace`.
#[tokio::test(flavor = "multi_thread")]
async fn plain_http_still_sending_on_the_tls_port_does_not_hold_a_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-plain-linger");
    let pki = Pki::new("test CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(
        &dir,
        &upstream.url(),
        &config(&server, None, "[]").server("shutdown_grace", "10s"),
    );
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 104857600\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 400 "), "{answer:?}");
    // The client goes on sending its body, a piece every 100 ms.
    let sending = tokio::spawn(async move {
        while stream.write_all(&[b'x'; 1024]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateway.terminate_within(Duration::from_secs(3)).await;
    sending.abort();
}

#[tokio::test]
async fn mtls_accepts_known_clients_and_scopes_keys_by_certificate_subject() {
    let dir = TestDir::new("tls-mtls");
    let pki = Pki::new("tenants CA");
    let server = pki.server(&dir, "server");
    let ca = pki.write_ca(&dir, "clients-ca.pem");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(
        &dir,
        &upstream.url(),
        &config(&server, Some(&ca), "[\"client_cert\"]"),
    );
    let port = gateway.addr.port();

    let anonymous = post(
        &tls_client(&pki.ca_pem(), None, false),
        port,
        "/v1/charges",
        "k",
    )
    .await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate must be refused"
    );
    let stranger_pki = Pki::new("another CA");
    let stranger = stranger_pki.client(&dir, "mallory");
    let refused = post(
        &tls_client(&pki.ca_pem(), Some(&stranger), false),
        port,
        "/v1/charges",
        "k",
    )
    .await;
    assert!(
        refused.is_err(),
        "a certificate from another CA must be refused"
    );
    assert_eq!(upstream.total(), 0);

    let alice = tls_client(&pki.ca_pem(), Some(&pki.client(&dir, "alice")), false);
    let bob = tls_client(&pki.ca_pem(), Some(&pki.client(&dir, "bob")), false);
    let a1 = post(&alice, port, "/v1/charges", "same-key").await.unwrap();
    let b1 = post(&bob, port, "/v1/charges", "same-key").await.unwrap();
    let a2 = post(&alice, port, "/v1/charges", "same-key").await.unwrap();
    assert_eq!((a1.status, b1.status), (201, 201));
    assert_ne!(
        a1.body, b1.body,
        "tenants must not see each other's answers"
    );
    assert_eq!(a1.body, a2.body);
    assert_eq!(upstream.executions("same-key"), 2);
}

#[tokio::test]
async fn https_upstream_with_a_private_ca() {
    let dir = TestDir::new("tls-upstream");
    let pki = Pki::new("upstream CA");
    let upstream =
        MockUpstream::start_tls(common::certs::server_config(&pki.server(&dir, "up"))).await;
    let ca = pki.write_ca(&dir, "upstream-ca.pem");
    let url = format!("https://localhost:{}", upstream.addr.port());
    let template = || https_upstream_config(|u| u);
    let trusted = https_upstream_config(|u| u.tls("ca", &ca));
    let gateway = GatewayProcess::start(&dir, &url, &trusted);
    let reply = gateway
        .client()
        .post("/v1/charges", Some("tls-1"), "{}")
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(upstream.executions("tls-1"), 1);
    drop(gateway);

    // Without the private CA the upstream's certificate is not trusted: nothing is sent.
    let dir2 = TestDir::new("tls-upstream-untrusted");
    let gateway = GatewayProcess::start(&dir2, &url, &template());
    let reply = gateway
        .client()
        .post("/v1/charges", Some("tls-2"), "{}")
        .await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["code"], "upstream-unreachable");
    assert_eq!(upstream.executions("tls-2"), 0);
    drop(gateway);

    // A CA in the system's trust store (here named by SSL_CERT_FILE, as
    // OpenSSL reads it) is trusted without `ca` (docs/configuration.md#tls).
    let dir3 = TestDir::new("tls-upstream-system");
    let ca_path = ca.to_str().expect("a UTF-8 path");
    let gateway = GatewayProcess::start_with_env(
        &dir3,
        &url,
        &template(),
        &[("SSL_CERT_FILE", ca_path), ("SSL_CERT_DIR", "/nonexistent")],
    );
    let reply = gateway
        .client()
        .post("/v1/charges", Some("tls-3"), "{}")
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(upstream.executions("tls-3"), 1);
}

/// An https upstream at an IPv6 address (`https://[::1]:P`) is dialed
/// there and its certificate checked against that address, over HTTP/1 and
/// HTTP/2: one that names other addresses only is refused, nothing sent.
#[tokio::test]
async fn an_https_upstream_at_an_ipv6_address_is_verified_by_that_address() {
    let dir = TestDir::new("tls-upstream-ipv6");
    let pki = Pki::new("upstream CA");
    let ca = pki.write_ca(&dir, "upstream-ca.pem");
    let named = common::certs::server_config(&pki.server_for(&dir, "v6", &["::1"]));
    let other = common::certs::server_config(&pki.server_for(&dir, "v4", &["127.0.0.1"]));
    for (certificate, status) in [(named, 201), (other, 502)] {
        let upstream = MockUpstream::start_on("[::1]:0", Some(certificate)).await;
        let url = format!("https://{}", upstream.addr);
        assert!(url.starts_with("https://[::1]:"), "{url}");
        for http2 in [false, true] {
            let dir = TestDir::new("tls-upstream-ipv6-gateway");
            let template = https_upstream_config(|u| u.tls("ca", &ca).set("http2", http2));
            let gateway = GatewayProcess::start(&dir, &url, &template);
            let key = format!("ipv6-{http2}");
            let reply = gateway.client().post("/v1/charges", Some(&key), "{}").await;
            assert_eq!(reply.status, status, "http2 {http2}: {}", reply.text());
            assert_eq!(upstream.executions(&key), u64::from(status == 201));
        }
    }
}

#[tokio::test]
async fn reload_rereads_certificates_without_dropping_connections() {
    let dir = TestDir::new("tls-reload");
    let old_pki = Pki::new("old CA");
    let server = old_pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&server, None, "[]"));
    let port = gateway.addr.port();
    let old_client = tls_client(&old_pki.ca_pem(), None, false);
    assert_eq!(
        post(&old_client, port, "/echo", "a").await.unwrap().status,
        200
    );

    let new_pki = Pki::new("new CA");
    let renewed = new_pki.server(&TestDir::new("tls-reload-new"), "server");
    std::fs::write(&server.cert, &renewed.cert_pem).unwrap();
    std::fs::write(&server.key, &renewed.key_pem).unwrap();
    gateway.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The open (pooled) connection keeps working; new connections get the new certificate.
    assert_eq!(
        post(&old_client, port, "/echo", "b").await.unwrap().status,
        200
    );
    let new_client = tls_client(&new_pki.ca_pem(), None, false);
    assert_eq!(
        post(&new_client, port, "/echo", "c").await.unwrap().status,
        200
    );
    let fresh_old = tls_client(&old_pki.ca_pem(), None, false);
    assert!(post(&fresh_old, port, "/echo", "d").await.is_err());
}

/// A rotation that swaps the certificate and the key (a Kubernetes Secret's
/// `..data` link flipped, cert-manager writing both) can land between the
/// reload's two reads: it reads the new certificate and the old key. That
/// read is read again before the reload is refused; here the key file is a
/// FIFO whose first read gives the old key and every later one the new key.
#[tokio::test]
async fn a_reload_reading_across_a_rotation_reads_the_pair_again() {
    let dir = TestDir::new("tls-reload-rotation");
    let old_pki = Pki::new("old CA");
    let server = old_pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(&server, None, "[]"));
    let port = gateway.addr.port();

    let new_pki = Pki::new("new CA");
    let renewed = new_pki.server(&TestDir::new("tls-reload-rotation-new"), "server");
    std::fs::write(&server.cert, &renewed.cert_pem).unwrap();
    std::fs::remove_file(&server.key).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&server.key)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(made.success());
    let (fifo, old_key, new_key) = (server.key.clone(), server.key_pem.clone(), renewed.key_pem);
    // Detached: it waits for a reader; the test process ends it.
    std::thread::spawn(move || {
        for read in 0.. {
            let key = if read == 0 { &old_key } else { &new_key };
            match std::fs::OpenOptions::new().write(true).open(&fifo) {
                Ok(mut file) => {
                    let _ = std::io::Write::write_all(&mut file, key.as_bytes());
                }
                Err(_) => return,
            }
        }
    });
    gateway.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let metrics = loop {
        let metrics = gateway.admin_client().get("/metrics").await.text();
        if ["ok", "rejected"].iter().any(|result| {
            metrics.contains(&format!(
                "idemgate_config_reloads_total{{result=\"{result}\"}} 1"
            ))
        }) {
            break metrics;
        }
        assert!(std::time::Instant::now() < deadline, "no reload counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}\n{}",
        gateway.log_text()
    );
    let new_client = tls_client(&new_pki.ca_pem(), None, false);
    assert_eq!(
        post(&new_client, port, "/echo", "a").await.unwrap().status,
        200
    );
}

/// A process started on plain HTTP asks no client for a certificate until a
/// restart: a reload that scopes keys by `client_cert` would put every client
/// in one namespace, so it is refused and the running config stays.
#[tokio::test]
async fn a_reload_cannot_scope_by_client_cert_on_a_plain_listener() {
    let dir = TestDir::new("tls-reload-plain");
    let pki = Pki::new("CA");
    let server = pki.server(&dir, "server");
    let ca = pki.write_ca(&dir, "clients-ca.pem");
    let upstream = MockUpstream::start().await;
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &plain("[]"));
    // The same file with TLS, mutual TLS and keys scoped by certificate.
    gateway.write_config(&config(&server, Some(&ca), "[\"client_cert\"]"));
    gateway.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let metrics = gateway.admin_client().get("/metrics").await.text();
    assert!(
        metrics.contains("idemgate_config_reloads_total{result=\"rejected\"} 1"),
        "{metrics}"
    );
    // Counted before it is logged: waited for.
    assert!(
        gateway
            .logged_line("scope client_cert", Duration::from_secs(10))
            .await
            .is_some(),
        "{}",
        gateway.log_text()
    );
    // Still the plain listener and the running config.
    let reply = gateway.client().post("/v1/charges", Some("k"), "{}").await;
    assert_eq!(reply.status, 201);
}

/// A reload whose certificate cannot be used is refused naming the file
/// and the field, as `check` names them; the running certificates stay.
#[tokio::test]
async fn a_reload_with_an_unusable_key_names_the_file_and_field() {
    let dir = TestDir::new("tls-reload-bad-key");
    let pki = Pki::new("CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let with_admin = |tls: Tls| plain("[]").server_tls(tls).admin_token_env(TOKEN_ENV);
    let gateway = GatewayProcess::start_with_env(
        &dir,
        &upstream.url(),
        &with_admin(Tls::of(&server)),
        &[(TOKEN_ENV, "t")],
    );
    let file = gateway.config_path().to_owned();
    let missing = dir.path("missing.key");
    gateway.write_config(&with_admin(Tls::new(&server.cert, &missing)));
    let reply = gateway
        .admin_client()
        .send(
            "POST",
            "/admin/reload",
            &[("authorization", "Bearer t")],
            "",
        )
        .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = reply.json()["errors"][0].as_str().unwrap().to_owned();
    // `FILE:LINE:COL: server.tls.key: ...`, as `check` says it.
    let located = error
        .strip_prefix(&format!("{}:", file.display()))
        .and_then(|rest| rest.split_once(": server.tls.key: "))
        .map(|(line_column, _)| line_column.to_owned());
    assert!(
        located.is_some_and(|at| {
            let parts: Vec<&str> = at.split(':').collect();
            parts.len() == 2 && parts.iter().all(|n| n.parse::<usize>().is_ok())
        }),
        "{error}"
    );
    let client = tls_client(&pki.ca_pem(), None, false);
    let port = gateway.addr.port();
    assert_eq!(post(&client, port, "/echo", "a").await.unwrap().status, 200);
}

#[test]
fn bad_certificate_files_fail_startup_with_a_clear_message() {
    let dir = TestDir::new("tls-bad");
    let pki = Pki::new("CA");
    let server = pki.server(&dir, "server");
    let other = pki.server(&dir, "other");
    // The chain with its CA before the leaf, as a bundle concatenated the
    // wrong way round gives it.
    let reversed = dir.path("reversed.pem");
    std::fs::write(&reversed, format!("{}{}", pki.ca_pem(), server.cert_pem)).unwrap();
    let cases = [
        (
            reversed,
            server.key.clone(),
            "server.tls.cert",
            "the certificate of the key in",
        ),
        (
            server.key.clone(),
            server.key.clone(),
            "server.tls.cert",
            "no certificate in",
        ),
        (
            dir.path("missing.pem"),
            server.key.clone(),
            "server.tls.cert",
            "cannot read",
        ),
        (
            server.cert.clone(),
            other.key.clone(),
            "server.tls.key",
            "they come from different key pairs",
        ),
        (
            server.cert.clone(),
            dir.path("missing.key"),
            "server.tls.key",
            "cannot read",
        ),
    ];
    for (cert, key, field, says) in cases {
        let config = Config::new()
            .server_tls(Tls::new(&cert, &key))
            .upstream(Upstream::api())
            .route(Route::new("r", "api").plain());
        let config = common::gateway::render(
            &config,
            &dir,
            "http://127.0.0.1:1",
            common::gateway::free_port(),
            common::gateway::free_port(),
        );
        let path = dir.path("bad.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "-c", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(field), "{field} not named: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `http2 = true` towards an https upstream that
/// speaks HTTP/1.1 only and ignores ALPN sent it the HTTP/2 preface, which
/// it refused, and every keyed request was stored as `outcome-unknown`
/// (replayed for the whole retention) though none had run. The connection
/// is now refused when ALPN did not choose h2: nothing sent, key freed.
#[tokio::test]
async fn an_http2_upstream_that_does_not_agree_to_h2_is_unreachable_not_outcome_unknown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-h2-alpn");
    let pki = Pki::new("upstream CA");
    let identity = pki.server(&dir, "up");
    let mut config = (*common::certs::server_config(&identity)).clone();
    // An HTTP/1.1 server that does not take part in ALPN.
    config.alpn_protocols.clear();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                if stream.read(&mut buf).await.is_ok() {
                    let _ = stream
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                }
            });
        }
    });
    let ca = pki.write_ca(&dir, "upstream-ca.pem");
    let config = https_upstream_config(|u| u.set("http2", true).tls("ca", &ca));
    let gateway = GatewayProcess::start(&dir, &format!("https://localhost:{port}"), &config);
    for _ in 0..2 {
        assert_unreachable(&gateway, "h2-1").await;
    }
}

/// A keyed request answered 502 `upstream-unreachable`: nothing was sent,
/// and the key is free for the next try (which gets the same).
async fn assert_unreachable(gateway: &GatewayProcess, key: &str) {
    let reply = gateway.client().post("/v1/charges", Some(key), "{}").await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(
        reply.json()["code"],
        "upstream-unreachable",
        "{}",
        reply.text()
    );
}

/// An https upstream that takes TCP connections but never answers the
/// TLS ClientHello: the handshake never finishes.
async fn stalled_handshake_upstream() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    port
}

/// Keyed requests to an `http2 = true` upstream with `connect_timeout`
/// whose handshake never finishes: each is 502 `upstream-unreachable`
/// (nothing sent, key freed) within `within`.
async fn unreachable_while_the_handshake_stalls(
    name: &str,
    connect_timeout: &str,
    within: Duration,
) {
    let dir = TestDir::new(name);
    let port = stalled_handshake_upstream().await;
    let config =
        https_upstream_config(|u| u.set("http2", true).set("connect_timeout", connect_timeout));
    let gateway = GatewayProcess::start(&dir, &format!("https://localhost:{port}"), &config);
    for _ in 0..2 {
        let started = std::time::Instant::now();
        assert_unreachable(&gateway, "stalled-1").await;
        assert!(started.elapsed() < within, "took {:?}", started.elapsed());
    }
}

/// An `http2 = true` https upstream that takes
/// the TCP connection but never finishes the TLS handshake held a keyed
/// request for the whole upstream `timeout` (hyper's connector bounds the
/// TCP connect only), which then stored it as 504 `outcome-unknown`,
/// replayed for the whole retention, though no byte of it had been sent.
/// The connect, handshake included, is now bounded by `connect_timeout`,
/// as towards HTTP/1 upstreams: 502 `upstream-unreachable`, key freed.
#[tokio::test]
async fn an_http2_upstream_that_never_finishes_the_handshake_is_unreachable_not_outcome_unknown() {
    // The upstream `timeout` is 2s.
    unreachable_while_the_handshake_stalls(
        "tls-h2-stalled-handshake",
        "300ms",
        Duration::from_secs(2),
    )
    .await;
}

/// With a `connect_timeout` longer than the
/// upstream's `timeout`, a keyed request still waiting for the first
/// HTTP/2 connection when `timeout` ran out was stored as 504
/// `outcome-unknown` though nothing was sent (towards HTTP/1 upstreams it
/// is "not sent"). A request handed over while no connection was open,
/// and none opened since, is now 502 `upstream-unreachable`, key freed.
#[tokio::test]
async fn an_http2_connect_slower_than_the_timeout_is_unreachable_not_outcome_unknown() {
    // The upstream `timeout` (2s) runs out first.
    unreachable_while_the_handshake_stalls("tls-h2-slow-connect", "10s", Duration::from_secs(4))
        .await;
}

/// An https upstream that requires a client
/// certificate the gateway does not present refuses the TLS 1.3 handshake
/// only after the gateway has finished its side and written the request,
/// so the refusal came where the answer was awaited, and every keyed
/// request was stored as `outcome-unknown` though the upstream never read
/// one. A handshake refusal before any byte from the upstream is now
/// "not sent": 502 `upstream-unreachable`, key freed.
#[tokio::test]
async fn an_upstream_refusing_the_client_certificate_is_unreachable_not_outcome_unknown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-upstream-mtls");
    let pki = Pki::new("upstream CA");
    let identity = pki.server(&dir, "up");
    let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(pki.ca_pem().as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let requests = read.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let requests = requests.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                if stream.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                }
            });
        }
    });
    let ca = pki.write_ca(&dir, "upstream-ca.pem");
    let config = https_upstream_config(|u| u.tls("ca", &ca));
    let gateway = GatewayProcess::start(&dir, &format!("https://localhost:{port}"), &config);
    for _ in 0..2 {
        assert_unreachable(&gateway, "mtls-1").await;
    }
    assert_eq!(read.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A reload that reads an https upstream's trust as it was (the same CA
/// file, the same system store) keeps its connections, as for http://, so
/// `max_connections` holds across reloads and no handshake is made again;
/// once the trust read is another (a CA file rotated), new connections are
/// made with it.
#[tokio::test]
async fn a_reload_keeps_an_https_upstream_s_connections_until_its_trust_changes() {
    let dir = TestDir::new("tls-upstream-reload");
    let pki = Pki::new("upstream CA");
    let upstream =
        MockUpstream::start_tls(common::certs::server_config(&pki.server(&dir, "up"))).await;
    let ca = pki.write_ca(&dir, "upstream-ca.pem");
    let url = format!("https://localhost:{}", upstream.addr.port());
    let gateway = GatewayProcess::start(&dir, &url, &https_upstream_config(|u| u.tls("ca", &ca)));
    let client = gateway.client();
    for n in 1..=4 {
        let reply = client
            .post("/v1/charges", Some(&format!("r{n}")), "{}")
            .await;
        assert_eq!(reply.status, 201, "{}", reply.text());
        gateway.reload_by_signal(n).await;
    }
    assert_eq!(upstream.connections().0, 1, "connections opened");

    // The same CA and another one beside it: the trust changed.
    let other = Pki::new("another CA");
    std::fs::write(&ca, format!("{}{}", pki.ca_pem(), other.ca_pem())).unwrap();
    gateway.reload_by_signal(5).await;
    let reply = client.post("/v1/charges", Some("r5"), "{}").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(upstream.connections().0, 2, "connections opened");
}

/// The value of `idemgate_tls_refused_total` for `listener` and `reason`
/// in a `/metrics` text, `None` when the series is absent.
fn tls_refused(metrics: &str, listener: &str, reason: &str) -> Option<u64> {
    let series =
        format!("idemgate_tls_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|value| value.parse().unwrap())
}

/// Connections a TLS listener closes without serving a request are counted
/// by why (`idemgate_tls_refused_total`) and logged naming the peer and the
/// cause, once per interval for each reason: an operator sees a client that
/// speaks plain HTTP to the port, or one refused for its certificate,
/// without scanners filling the log. Nothing of theirs reaches a route.
#[tokio::test]
async fn tls_refusals_are_counted_by_reason_and_logged_once_per_interval() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-refusals");
    let pki = Pki::new("tenants CA");
    let server = pki.server(&dir, "server");
    let ca = pki.write_ca(&dir, "clients-ca.pem");
    let alice = pki.client(&dir, "alice");
    let upstream = MockUpstream::start().await;
    let config =
        config(&server, Some(&ca), "[\"client_cert\"]").server("header_read_timeout", "1s");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let port = gateway.addr.port();
    let metrics = gateway.admin_client().get("/metrics").await.text();
    for reason in [
        "plain_http",
        "timeout",
        "silent",
        "client_certificate",
        "gateway_certificate",
        "protocol",
    ] {
        assert_eq!(
            tls_refused(&metrics, "data", reason),
            Some(0),
            "{reason} reads 0 before the first: {metrics}"
        );
    }

    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
        stream
            .write_all(b"POST /v1/charges HTTP/1.1\r\nHost: localhost\r\nIdempotency-Key: p\r\nContent-Length: 2\r\n\r\n{}")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        assert!(answer.starts_with(b"HTTP/1.1 400 "));
    }
    let refused = |identity: Option<&Identity>, trusted: &str| {
        let client = tls_client(trusted, identity, false);
        async move {
            let reply = post(&client, port, "/v1/charges", "k").await;
            assert!(reply.is_err(), "the handshake is refused");
        }
    };
    // No certificate; one from another CA; one expired.
    refused(None, &pki.ca_pem()).await;
    let stranger = Pki::new("another CA").client(&dir, "mallory");
    refused(Some(&stranger), &pki.ca_pem()).await;
    refused(Some(&pki.expired_client(&dir, "lapsed")), &pki.ca_pem()).await;
    // A client that does not trust the gateway's certificate.
    refused(Some(&alice), &Pki::new("unrelated CA").ca_pem()).await;
    // A client that offers only a protocol the gateway does not speak.
    let mut only_http10 = common::tls_client::client_config(&pki.ca_pem(), Some(&alice));
    only_http10.alpn_protocols = vec![b"http/1.0".to_vec()];
    let tcp = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let handshake = tokio_rustls::TlsConnector::from(Arc::new(only_http10))
        .connect(name, tcp)
        .await;
    assert!(handshake.is_err(), "no shared ALPN protocol is refused");
    // One stops in the middle of its ClientHello, one sends nothing: both
    // closed at `header_read_timeout`, each told as what it is.
    let mut stalled = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    stalled
        .write_all(&[
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ])
        .await
        .unwrap();
    let mut silent = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    for stream in [&mut stalled, &mut silent] {
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "closed at header_read_timeout");
    }
    // A probe that connects and closes at once (a load balancer's TCP
    // check) is no refusal.
    drop(tokio::net::TcpStream::connect(gateway.addr).await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let served = post(
        &tls_client(&pki.ca_pem(), Some(&alice), false),
        port,
        "/v1/charges",
        "k",
    )
    .await
    .unwrap();
    assert_eq!(served.status, 201);
    assert_eq!(
        upstream.total(),
        1,
        "only the served request reached the upstream"
    );

    let metrics = gateway.admin_client().get("/metrics").await.text();
    let counted = |reason| tls_refused(&metrics, "data", reason);
    assert_eq!(counted("plain_http"), Some(3), "{metrics}");
    assert_eq!(counted("client_certificate"), Some(3), "{metrics}");
    assert_eq!(counted("gateway_certificate"), Some(1), "{metrics}");
    assert_eq!(counted("protocol"), Some(1), "{metrics}");
    assert_eq!(counted("timeout"), Some(1), "{metrics}");
    assert_eq!(counted("silent"), Some(1), "{metrics}");
    assert!(
        metrics.contains("idemgate_requests_total{outcome=\"new\",route=\"charges\"} 1"),
        "{metrics}"
    );

    let said = [
        ("plain HTTP on the TLS listener", "answered 400"),
        ("client certificate refused", "presented none"),
        ("the client refused the gateway's certificate", "UnknownCA"),
        ("TLS handshake failed", "ALPN"),
        ("TLS handshake not finished", "header_read_timeout"),
        ("sent no byte", "header_read_timeout"),
    ];
    // Each refusal is counted, then logged, after its client saw it.
    for (says, _) in said {
        gateway.logged_line(says, Duration::from_secs(10)).await;
    }
    let log = gateway.log_text();
    let lines = |says: &str| {
        log.lines()
            .filter(|line| line.contains(says))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for (says, cause) in said {
        let found = lines(says);
        assert_eq!(found.len(), 1, "one line per interval for {says:?}:\n{log}");
        assert!(found[0].contains("listener=\"data\""), "{}", found[0]);
        assert!(found[0].contains("peer=127.0.0.1:"), "{}", found[0]);
        assert!(found[0].contains(cause), "{}", found[0]);
    }
}

/// An `https://` url towards an upstream that speaks plain HTTP on that
/// port (a url written with the wrong scheme): over HTTP/1 and HTTP/2 alike,
/// nothing is sent, the key is freed (502 `upstream-unreachable`, the same
/// on the retry), and the log says the upstream does not speak TLS rather
/// than rustls's "received corrupt message of type InvalidContentType".
#[tokio::test]
async fn an_https_url_to_a_plain_http_upstream_is_unreachable_and_said_so() {
    let upstream = MockUpstream::start().await;
    let url = format!("https://localhost:{}", upstream.addr.port());
    for http2 in [false, true] {
        let dir = TestDir::new("tls-upstream-plain");
        let config = https_upstream_config(|u| u.set("http2", http2));
        let gateway = GatewayProcess::start(&dir, &url, &config);
        for _ in 0..2 {
            assert_unreachable(&gateway, "plain-1").await;
        }
        assert_eq!(upstream.total(), 0, "http2 = {http2}");
        let log = gateway.log_text();
        let line = log
            .lines()
            .find(|line| line.contains("upstream unreachable"))
            .unwrap_or_else(|| panic!("no line: {log}"));
        assert!(
            line.contains("the upstream does not speak TLS on this port"),
            "http2 = {http2}: {line}"
        );
    }
}

/// The handshake and the first request head share one
/// `header_read_timeout`, counted from the accept: a client that takes
/// most of it for the handshake, then sends its head a byte at a time, is
/// closed when it runs out, not a whole `header_read_timeout` after the
/// handshake.
#[tokio::test]
async fn the_handshake_and_the_first_head_share_header_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("tls-one-deadline");
    let pki = Pki::new("test CA");
    let server = pki.server(&dir, "server");
    let upstream = MockUpstream::start().await;
    let config = config(&server, None, "[]").server("header_read_timeout", "2s");
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);

    let accepted = std::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1400)).await;
    let mut client = common::tls_client::client_config(&pki.ca_pem(), None);
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .expect("the handshake, late but in time");
    let head = b"GET /echo HTTP/1.1\r\nHost: localhost\r\nX-Slow: yes\r\n\r\n";
    let mut closed = false;
    for byte in head.iter().take(head.len() - 1) {
        if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
            closed = true;
            break;
        }
        let mut answer = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(100), tls.read(&mut answer)).await {
            Ok(Ok(0) | Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => panic!("an answer to half a head: {:?}", &answer[..n]),
            Err(_) => {}
        }
    }
    let took = accepted.elapsed();
    assert!(closed, "the head was still being read after {took:?}");
    // At 2 s, reads of 100 ms and a loaded machine aside; a timeout of its
    // own for the head would close it at 3.4 s.
    assert!(
        took < Duration::from_millis(3000),
        "closed {took:?} after the accept"
    );
    assert_eq!(upstream.total(), 0);
}

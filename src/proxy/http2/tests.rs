//! The connection holder (mod.rs) against a plain-text h2c server: where
//! it dials, when it opens, replaces and closes a connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::*;

/// An h2c server on `addr` that answers with the `:authority` it got;
/// connections accepted and open now.
async fn h2c_server(addr: SocketAddr) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, open) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (counted, opened) = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            opened.fetch_add(1, Ordering::SeqCst);
            let opened = opened.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    let authority = request.uri().authority().map(|a| a.to_string());
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                        authority.unwrap_or_default(),
                    ))))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                opened.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, accepted, open)
}

fn holder(addr: SocketAddr, idle_timeout: Duration) -> Http2Upstream {
    let reuse = Reuse {
        requests: MAX_REQUESTS,
        age: MAX_AGE,
    };
    reusing(addr, idle_timeout, reuse)
}

/// [`holder`], with a connection taking new requests as `reuse` says.
fn reusing(addr: SocketAddr, idle_timeout: Duration, reuse: Reuse) -> Http2Upstream {
    let connections = Arc::new(Http2Connections::default());
    let tls = crate::tls::client_config("api", None).unwrap();
    let dialer = dialer(tls, Duration::from_secs(1), connections.clone());
    let target = format!("http://{addr}").parse().unwrap();
    let connect_timeout = Duration::from_secs(1);
    Http2Upstream::reused(
        dialer,
        target,
        idle_timeout,
        connect_timeout,
        reuse,
        connections,
    )
}

/// The `:authority` the server saw for a request to `uri`.
async fn authority(upstream: &Http2Upstream, uri: &str) -> Result<String, UpstreamError> {
    let request = Request::get(uri).body(crate::body::empty()).unwrap();
    let (place, _) = upstream.place(Duration::from_secs(1)).await?;
    let response = upstream
        .send(request, &place, &Handed::default(), &Handover::default())
        .await?;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Ok(String::from_utf8(body.to_vec()).unwrap())
}

async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 3 s");
}

/// The point of the holder: a request's URI says what the upstream is
/// told, never where to connect.
#[tokio::test]
async fn the_uri_is_the_authority_sent_never_the_address_dialed() {
    let (addr, accepted, _) = h2c_server("127.0.0.1:0".parse().unwrap()).await;
    let upstream = holder(addr, Duration::from_secs(60));
    for host in ["elsewhere.invalid", "127.0.0.1:1", "shop.example:8080"] {
        let seen = authority(&upstream, &format!("http://{host}/x"))
            .await
            .unwrap();
        assert_eq!(seen, host);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_the_next_request_opens_another() {
    let (addr, accepted, open) = h2c_server("127.0.0.1:0".parse().unwrap()).await;
    let upstream = holder(addr, Duration::from_millis(300));
    authority(&upstream, "http://a/").await.unwrap();
    let started = Instant::now();
    // Used again before the idle timeout: still the same connection.
    tokio::time::sleep(Duration::from_millis(150)).await;
    authority(&upstream, "http://a/").await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    wait_until(|| open.load(Ordering::SeqCst) == 0).await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "idle counts from the last use"
    );
    authority(&upstream, "http://a/").await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A connect that fails is every waiting request's failure, as not sent,
/// and is not kept: the next request dials again.
#[tokio::test]
async fn a_failed_connect_is_not_sent_and_the_next_request_dials_again() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let upstream = holder(addr, Duration::from_secs(60));
    let (first, second) = tokio::join!(
        authority(&upstream, "http://a/"),
        authority(&upstream, "http://a/")
    );
    for failed in [first, second] {
        assert!(
            matches!(failed, Err(UpstreamError::NotSent(_))),
            "{failed:?}"
        );
    }
    let (_, accepted, _) = h2c_server(addr).await;
    assert_eq!(authority(&upstream, "http://a/").await.unwrap(), "a");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// A connection open for the longest it takes requests is let go of
/// though it is in use (closed by the upstream's count once its streams
/// are done), and the next request opens another.
#[tokio::test]
async fn a_connection_open_for_its_longest_is_replaced() {
    let (addr, accepted, open) = h2c_server("127.0.0.1:0".parse().unwrap()).await;
    let reuse = Reuse {
        requests: MAX_REQUESTS,
        age: Duration::from_millis(300),
    };
    let upstream = reusing(addr, Duration::from_secs(60), reuse);
    authority(&upstream, "http://a/").await.unwrap();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(150)).await;
    authority(&upstream, "http://a/").await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    wait_until(|| open.load(Ordering::SeqCst) == 0).await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    authority(&upstream, "http://a/").await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A worn-out connection is handed no new request; the one answer still
/// on it goes on, and the connection closes once it is done. Meanwhile a
/// request waits for the new connection as for a first one: the old one
/// counts as open no more (a timeout there is "never sent").
#[tokio::test]
async fn a_worn_out_connection_finishes_its_streams_and_closes() {
    let (addr, accepted, open) = h2c_server("127.0.0.1:0".parse().unwrap()).await;
    let reuse = Reuse {
        requests: 2,
        age: MAX_AGE,
    };
    let upstream = reusing(addr, Duration::from_secs(60), reuse);
    let connections = upstream.connections();
    authority(&upstream, "http://a/").await.unwrap();
    let before_last = connections.before();
    let request = Request::get("http://last/")
        .body(crate::body::empty())
        .unwrap();
    let (place, _) = upstream.place(Duration::from_secs(1)).await.unwrap();
    let last = upstream
        .send(request, &place, &Handed::default(), &Handover::default())
        .await
        .unwrap();
    let after_last = connections.before();
    assert!(!connections.never_connected_since(&before_last));
    assert!(connections.never_connected_since(&after_last));
    assert_eq!(open.load(Ordering::SeqCst), 1, "its answer is still read");

    authority(&upstream, "http://a/").await.unwrap();
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert!(!connections.never_connected_since(&after_last));
    let body = last.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "last");
    drop(place);
    wait_until(|| open.load(Ordering::SeqCst) == 1).await;
}

//! A bare HTTP/2 client (prior knowledge) for the cases a normal client
//! does not send: the h2 crate's own handle, one request at a time.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use h2::client::SendRequest;
use tokio::net::TcpStream;

const WITHIN: Duration = Duration::from_secs(10);

/// A connection to `addr`, ready for its first request.
pub async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("handshake");
    tokio::spawn(connection);
    client.ready().await.expect("ready")
}

/// Sends a request without a body and waits for its answer head; `client`
/// is ready for the next request after it.
pub async fn send(
    client: &mut SendRequest<Bytes>,
    request: http::Request<()>,
) -> http::Response<RecvStream> {
    let (answer, _) = client.send_request(request, true).expect("sent");
    let answer = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer in time")
        .expect("an answer");
    *client = client.clone().ready().await.expect("ready");
    answer
}

/// The answer's whole body.
pub async fn body(answer: http::Response<RecvStream>) -> Vec<u8> {
    let mut body = answer.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = tokio::time::timeout(WITHIN, body.data())
        .await
        .expect("the end in time")
    {
        bytes.extend_from_slice(&chunk.expect("a chunk"));
    }
    bytes
}

/// A keyed request sent over HTTP/2 by a client that then takes nothing of
/// its answer (a flow-control window of 0): the answer's bytes stay in the
/// gateway, whatever the kernel's socket buffers could take, until the
/// connection goes (the returned task, aborted). Its status.
pub async fn unread(addr: SocketAddr, key: &str, path: &str) -> (tokio::task::JoinHandle<()>, u16) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("handshake");
    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
    let mut client = client.ready().await.expect("ready");
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(())
        .expect("request");
    let (answer, mut send) = client.send_request(request, false).expect("sent");
    send.send_data(Bytes::from_static(b"{}"), true)
        .expect("body");
    // The connection and the answer live together in one task: aborting
    // it closes the connection with the answer untaken.
    let held = tokio::spawn(async move {
        let connection = tokio::spawn(connection);
        let answer = answer.await.expect("an answer");
        let status = answer.status().as_u16();
        let _ = answer_tx.send(status);
        let _keep = (answer, client, send);
        let _ = connection.await;
    });
    let status = tokio::time::timeout(WITHIN, answer_rx)
        .await
        .expect("a head in time")
        .expect("a head");
    (held, status)
}

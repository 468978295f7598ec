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

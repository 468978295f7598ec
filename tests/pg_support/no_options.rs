//! A TCP relay to PostgreSQL that drops the `options` startup parameter, as
//! PgBouncer does under `ignore_startup_parameters = options`: sessions
//! start without what the URL's options (and the store's own
//! `statement_timeout`) would have set, and nothing says so.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The startup packet's protocol version 3.0; anything else (an SSL or
/// GSS request) is answered "no" and the client's next packet read.
const PROTOCOL_3: u32 = 196_608;

pub struct NoOptions {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl NoOptions {
    pub async fn start(target: SocketAddr) -> NoOptions {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target));
            }
        });
        NoOptions { addr, task }
    }
}

impl Drop for NoOptions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr) -> std::io::Result<()> {
    let startup = loop {
        let len = client.read_u32().await? as usize;
        let mut body = vec![0; len.saturating_sub(4)];
        client.read_exact(&mut body).await?;
        if body.len() >= 4 && u32::from_be_bytes(body[..4].try_into().unwrap()) == PROTOCOL_3 {
            break body;
        }
        client.write_all(b"N").await?;
    };
    let mut kept = startup[..4].to_vec();
    let mut fields = startup[4..].split(|b| *b == 0);
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        if name.is_empty() {
            break;
        }
        if name != b"options" {
            for part in [name, value] {
                kept.extend_from_slice(part);
                kept.push(0);
            }
        }
    }
    kept.push(0);
    let mut server = TcpStream::connect(target).await?;
    server.write_u32(kept.len() as u32 + 4).await?;
    server.write_all(&kept).await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

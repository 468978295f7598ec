//! A TCP relay to PostgreSQL that a test can cut and restore: an outage of
//! the database as the gateway sees it (sessions dropped, new connections
//! closed at once), without touching the PostgreSQL other tests share. It
//! can also hold the database's replies back (`delay_replies`): a database
//! far away, whose every answer arrives late.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub struct Switch {
    pub addr: SocketAddr,
    on: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    /// How long the database's bytes are held back, in ms.
    delay_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Switch {
    pub async fn start(target: SocketAddr) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let on = Arc::new(AtomicBool::new(true));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (cuts, _) = watch::channel(0u64);
        let (gate, cut_rx, delay) = (on.clone(), cuts.subscribe(), delay_ms.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if !gate.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = cut_rx.clone();
                cut.mark_unchanged();
                let delay = delay.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut from_client, &mut to_server) => {}
                        () = held_back(&mut from_server, &mut to_client, &delay) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Switch {
            addr,
            on,
            cuts,
            delay_ms,
            task,
        }
    }

    /// Every byte the database sends from now on reaches the gateway
    /// `delay` after it left the database (in order, none lost).
    pub fn delay_replies(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Drops every relayed session and refuses new ones until `restore`.
    pub fn cut(&self) {
        self.on.store(false, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.on.store(true, Ordering::SeqCst);
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
async fn held_back(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    delay: &AtomicU64,
) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            let at = Instant::now() + Duration::from_millis(delay.load(Ordering::SeqCst));
            if chunks.send((at, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writing = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // Reading ends first at the database's close; what it read is still due.
    tokio::join!(reading, writing);
}

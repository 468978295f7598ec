//! A TCP relay to PostgreSQL that a test can cut and restore: an outage of
//! the database as the gateway sees it (sessions dropped, new connections
//! closed at once), without touching the PostgreSQL other tests share.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Switch {
    pub addr: SocketAddr,
    on: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Switch {
    pub async fn start(target: SocketAddr) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let on = Arc::new(AtomicBool::new(true));
        let (cuts, _) = watch::channel(0u64);
        let (gate, cut_rx) = (on.clone(), cuts.subscribe());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                if !gate.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = cut_rx.clone();
                cut.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Switch {
            addr,
            on,
            cuts,
            task,
        }
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

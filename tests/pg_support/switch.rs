//! A TCP relay to PostgreSQL that a test can cut and restore: an outage of
//! the database as the gateway sees it (sessions dropped, new connections
//! closed at once), without touching the PostgreSQL other tests share. It
//! can also hold the database's replies back (`delay_replies`): a database
//! far away, whose every answer arrives late. And it can lose one reply
//! (`lose_reply_to`): the statement reaches the database, which runs and
//! commits it, and the session is cut as its answer comes back. And it can
//! stall the sessions open at one moment (`stall_open_sessions`): their
//! statements reach the database, whose answers are held back for as long
//! as the relay runs, while sessions opened later are answered at once (a
//! statement waiting in PgBouncer's queue for a server connection, or a
//! server connection stuck, while the database answers everyone else).
//! And it counts the messages the gateway sends (`sent`): how many round
//! trips and statements an operation costs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::messages::{Framing, Sent};

pub struct Switch {
    pub addr: SocketAddr,
    on: Arc<AtomicBool>,
    cuts: Arc<watch::Sender<u64>>,
    /// How long the database's bytes are held back, in ms.
    delay_ms: Arc<AtomicU64>,
    trap: Arc<Mutex<Option<Trap>>>,
    /// How many replies a trap has lost.
    lost: Arc<AtomicU64>,
    /// How many sessions were opened.
    opened: Arc<AtomicU64>,
    /// Sessions numbered below it (in the order they were opened) are
    /// stalled.
    stalled_below: Arc<watch::Sender<u64>>,
    /// The messages the gateway's sessions sent, by type.
    sent: Arc<Sent>,
    task: tokio::task::JoinHandle<()>,
}

/// The next statement whose bytes carry `needle` loses its reply.
#[derive(Clone)]
struct Trap {
    needle: Vec<u8>,
    /// Then the database stays unreachable (every session cut, new ones
    /// refused) until `restore`.
    stay_down: bool,
}

impl Switch {
    pub async fn start(target: SocketAddr) -> Switch {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let on = Arc::new(AtomicBool::new(true));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (cuts, _) = watch::channel(0u64);
        let cuts = Arc::new(cuts);
        let trap: Arc<Mutex<Option<Trap>>> = Arc::default();
        let lost = Arc::new(AtomicU64::new(0));
        let opened = Arc::new(AtomicU64::new(0));
        let stalled_below = Arc::new(watch::channel(0u64).0);
        let sent = Arc::new(Sent::default());
        let counting = sent.clone();
        let (gate, cut_rx, delay) = (on.clone(), cuts.subscribe(), delay_ms.clone());
        let (numbering, stalls) = (opened.clone(), stalled_below.clone());
        let (traps, cutting, losing) = (trap.clone(), cuts.clone(), lost.clone());
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
                let number = numbering.fetch_add(1, Ordering::SeqCst);
                let stalled = stalls.subscribe();
                let counting = counting.clone();
                let (traps, gate, cutting, losing) =
                    (traps.clone(), gate.clone(), cutting.clone(), losing.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    // Set once this session carried the trapped statement.
                    let sprung: Arc<Mutex<Option<Trap>>> = Arc::default();
                    let lose = || {
                        let trap = sprung.lock().unwrap().clone()?;
                        losing.fetch_add(1, Ordering::SeqCst);
                        if trap.stay_down {
                            gate.store(false, Ordering::SeqCst);
                            cutting.send_modify(|n| *n += 1);
                        }
                        Some(())
                    };
                    tokio::select! {
                        () = forward(&mut from_client, &mut to_server, &traps, &sprung, &counting) => {}
                        () = held_back(&mut from_server, &mut to_client, &delay, &lose, number, stalled) => {}
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
            trap,
            lost,
            opened,
            stalled_below,
            sent,
            task,
        }
    }

    /// The sessions open now stop getting the database's answers, for as
    /// long as the relay runs (held back, never lost): what they send still
    /// reaches the database. Sessions opened from now on are answered as
    /// usual.
    pub fn stall_open_sessions(&self) {
        let open_now = self.opened.load(Ordering::SeqCst);
        self.stalled_below.send_replace(open_now);
    }

    /// The next statement whose bytes carry `needle` (a key: it travels as
    /// a parameter) reaches the database, and the session is cut when the
    /// database's answer to it arrives: the answer is dropped, never
    /// relayed. With `stay_down`, the database is then unreachable (as
    /// `cut`) until `restore`.
    pub fn lose_reply_to(&self, needle: &str, stay_down: bool) {
        *self.trap.lock().unwrap() = Some(Trap {
            needle: needle.as_bytes().to_vec(),
            stay_down,
        });
    }

    /// How many replies `lose_reply_to` has dropped.
    pub fn replies_lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }

    /// Every byte the database sends from now on reaches the gateway
    /// `delay` after it left the database (in order, none lost).
    pub fn delay_replies(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many sessions the relay has opened to the database.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::SeqCst)
    }

    /// How many messages of type `kind` (`b'S'`: Sync, one per round trip;
    /// `b'E'`: Execute, one per statement run; `b'Q'`: a simple query) the
    /// gateway has sent through the relay.
    pub fn sent(&self, kind: u8) -> u64 {
        self.sent.of(kind)
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

/// Copies the gateway's bytes to the database, counting its messages in
/// `sent`; arms `sprung` (before the database can answer) when a chunk
/// carries the trap's needle.
async fn forward(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    traps: &Mutex<Option<Trap>>,
    sprung: &Mutex<Option<Trap>>,
    sent: &Sent,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut framing = Framing::default();
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        let chunk = &buf[..n];
        framing.feed(chunk, sent);
        {
            let mut trap = traps.lock().unwrap();
            let carries = trap.as_ref().is_some_and(|trap| {
                chunk
                    .windows(trap.needle.len())
                    .any(|w| w == trap.needle.as_slice())
            });
            if carries {
                *sprung.lock().unwrap() = trap.take();
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read, and
/// none while session `number` is stalled. Ends without relaying a chunk
/// for which `lose` says the reply is to be lost.
async fn held_back(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    delay: &AtomicU64,
    lose: &(impl Fn() -> Option<()> + Sync),
    number: u64,
    mut stalled: watch::Receiver<u64>,
) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if lose().is_some() {
                return;
            }
            let at = Instant::now() + Duration::from_millis(delay.load(Ordering::SeqCst));
            if chunks.send((at, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let writing = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if stalled.wait_for(|below| number >= *below).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    // Reading ends first at the database's close; what it read is still due.
    tokio::join!(reading, writing);
}

//! Memory under bursts of replays of one stored answer, against the real
//! binary: what concurrent replays hold, and what they count against
//! `max_buffered_bodies` (docs/behaviour.md, "Memory").

mod common;
mod pg_support;

use std::time::Duration;

use common::config::{Config, Route, Store, Upstream};
use common::{GatewayProcess, MockUpstream, TestDir};
use pg_support::TestSchema;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const WITHIN: Duration = Duration::from_secs(20);

/// A 4 MB answer: above what the in-memory copies keep (1 MiB an entry),
/// so every replay of it that finds no other in flight reads the store.
const BIG: &str = "/v1/charges?pad=4000000";
const BIG_BYTES: u64 = 4_000_000;
const CLIENTS: usize = 300;

fn config(store: Store) -> Config {
    Config::new()
        .server("max_buffered_bodies", "64MiB")
        .store(store)
        .upstream(Upstream::api().timeout("10s"))
        .route(Route::api("charges", "/v1/charges"))
}

/// A connection that takes next to nothing of what it is sent (a 4 KiB
/// receive buffer), so an answer backs up into the gateway.
async fn slow_reader(gateway: &GatewayProcess) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("receive buffer");
    socket.connect(gateway.addr).await.expect("connect")
}

/// The status of the answer arriving on `stream`, read from its first bytes
/// only (the rest, the body, left untaken).
async fn status_of(stream: &mut TcpStream) -> u16 {
    let mut line = [0u8; 12];
    tokio::time::timeout(WITHIN, stream.read_exact(&mut line))
        .await
        .expect("a status line in time")
        .expect("a status line");
    std::str::from_utf8(&line[9..12])
        .ok()
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{:?}", String::from_utf8_lossy(&line)))
}

/// 300 clients replay one 4 MB answer at the same instant and take none of
/// it. Each replay used to read its own copy from the store before the
/// budget could refuse any (a group of reads the embedded store's writer,
/// or Postgres' batched reservation, answers at once): 1.2 GB. Now one read
/// of a record is shared by every lookup that arrives while it runs, and
/// what the replays hold is bounded by the budget (64 MiB here).
async fn a_burst_of_replays_holds_one_copy(store: Store, name: &str) {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new(name);
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config(store));
    let client = gateway.client();
    let first = client.post(BIG, Some("big"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    let replay = client.post(BIG, Some("big"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let before = gateway.memory_kib("VmRSS");

    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(slow_reader(&gateway).await);
    }
    let request = format!(
        "POST {BIG} HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: big\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    for stream in &mut clients {
        stream.write_all(request.as_bytes()).await.expect("request");
    }
    let mut replayed = 0;
    for stream in &mut clients {
        match status_of(stream).await {
            201 => replayed += 1,
            503 => {}
            other => panic!("status {other}"),
        }
    }
    let peak = gateway.memory_kib("VmHWM");
    let growth_mib = peak.saturating_sub(before) / 1024;
    eprintln!("{name}: {replayed} of {CLIENTS} replayed, peak {peak} KiB, +{growth_mib} MiB");
    assert!(replayed > 0, "every replay refused");
    // Each reading its own copy: CLIENTS x 4 MB (1.2 GB).
    let copies = CLIENTS as u64 * BIG_BYTES / (1 << 20);
    assert!(
        growth_mib < 200,
        "{CLIENTS} replays of a 4 MB answer grew the gateway by {growth_mib} MiB \
         (one copy each: {copies} MiB)"
    );
    drop(clients);
    gateway.until_no_body_held("the replays").await;
    assert_eq!(upstream.executions("big"), 1);
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_replays_of_a_large_answer_holds_one_copy_on_the_embedded_store() {
    a_burst_of_replays_holds_one_copy(Store::embedded(), "burst-embedded").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_replays_of_a_large_answer_holds_one_copy_on_postgres() {
    let schema = TestSchema::create().await;
    a_burst_of_replays_holds_one_copy(Store::postgres(&schema.url()), "burst-postgres").await;
}

/// Replays served from the one copy of an answer kept in memory hold no
/// memory of their own: the copy counts once against `max_buffered_bodies`
/// while any of them holds it, not once per client. Six clients that take
/// nothing of a 400 KB answer are all served under a 1 MiB budget (counted
/// per client, the third passed it and the fourth was refused 503), and
/// the budget shows one answer held.
#[tokio::test(flavor = "multi_thread")]
async fn replays_sharing_one_copy_count_it_once_against_the_body_budget() {
    let upstream = MockUpstream::start().await;
    let dir = TestDir::new("shared-copy-budget");
    let config = Config::new()
        .server("max_request_body", "64KiB")
        .server("max_buffered_bodies", "1MiB")
        .upstream(Upstream::api())
        .route(Route::api("charges", "/v1/charges"));
    let gateway = GatewayProcess::start(&dir, &upstream.url(), &config);
    let path = "/v1/charges?pad=400000";
    let first = gateway.client().post(path, Some("shared"), "{}").await;
    assert_eq!(first.status, 201, "{}", first.text());
    // Read from the store once, then kept in memory.
    let replay = gateway.client().post(path, Some("shared"), "{}").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    let mut holders = Vec::new();
    for n in 0..6 {
        let (holder, status) = common::h2::unread(gateway.addr, "shared", path).await;
        assert_eq!(status, 201, "replay {n}");
        holders.push(holder);
    }
    let holding = gateway.buffered_body_bytes().await;
    assert!(
        (400_000..500_000).contains(&holding),
        "one answer held, counted once: {holding}"
    );
    for holder in holders {
        holder.abort();
    }
    gateway.until_no_body_held("the replays").await;
    assert_eq!(upstream.executions("shared"), 1);
    let log = gateway.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

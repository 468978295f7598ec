//! The write pass: N concurrent producers (tokio tasks on one thread, as the
//! gateway's requests are) each send a reservation, wait for it, send the
//! completion and wait for that; one writer thread takes every queued job
//! into one batch (group commit, at most 512 jobs, src/store/embedded/writer.rs),
//! commits it, answers its new leases, syncs, and answers the rest.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::engine::Engine;
use crate::measure;
use crate::workload::{Job, Key, Outcome, Random, now_ms};

const MAX_BATCH: usize = 512;

type Queued = (Job, oneshot::Sender<Outcome>);

/// What one pass measured, over its measured seconds (after the warm-up).
#[derive(Clone, Debug, Default)]
pub struct WriteStats {
    pub seconds: f64,
    pub requests: u64,
    pub batches: u64,
    pub syncs: u64,
    pub jobs: u64,
    pub write_bytes: u64,
    pub process_cpu: Duration,
    pub writer_cpu: Duration,
    /// The part of `writer_cpu` spent in the kernel.
    pub writer_system_cpu: Duration,
    pub producers_cpu: Duration,
    /// Reservation sent to completion answered, 99th percentile.
    pub p99: Duration,
    /// Requests completed over the whole pass, warm-up included.
    pub written: u64,
}

impl WriteStats {
    pub fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.seconds
    }
    pub fn per_request_us(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e6 / self.requests.max(1) as f64
    }
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    batches: AtomicU64,
    syncs: AtomicU64,
    jobs: AtomicU64,
    writer_tid: AtomicU64,
}

struct Snapshot {
    at: Instant,
    requests: u64,
    batches: u64,
    syncs: u64,
    jobs: u64,
    write_bytes: u64,
    process_cpu: Duration,
    writer_cpu: Duration,
    writer_system_cpu: Duration,
    producers_cpu: Duration,
}

impl Snapshot {
    fn take(counters: &Counters) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            requests: counters.requests.load(Relaxed),
            batches: counters.batches.load(Relaxed),
            syncs: counters.syncs.load(Relaxed),
            jobs: counters.jobs.load(Relaxed),
            write_bytes: measure::write_bytes(),
            process_cpu: measure::process_cpu(),
            writer_cpu: measure::thread_cpu(counters.writer_tid.load(Relaxed)),
            writer_system_cpu: measure::thread_system_cpu(counters.writer_tid.load(Relaxed)),
            producers_cpu: measure::this_thread_cpu(),
        }
    }
}

pub struct Pass {
    pub producers: usize,
    /// Counter keys (`00…01`, `00…02`, ...: consecutive keys land on the same
    /// index pages, as bench/run's counter rows) instead of random UUID v4.
    pub counter_keys: bool,
    pub warmup: Duration,
    pub measured: Duration,
    pub seed: u64,
}

/// Runs the pass on `engine` and hands it back with what was measured;
/// every 16th key completed goes to `written` (for the replay pass).
pub fn run(
    engine: Box<dyn Engine>,
    pass: &Pass,
    written: &Mutex<Vec<Key>>,
) -> anyhow::Result<(Box<dyn Engine>, WriteStats)> {
    let counters = Arc::new(Counters::default());
    let sequence = Arc::new(AtomicU64::new(pass.seed << 40));
    let (tx, rx) = std::sync::mpsc::channel::<Queued>();
    let writer = {
        let counters = counters.clone();
        std::thread::spawn(move || writer(engine, rx, &counters))
    };
    while counters.writer_tid.load(Relaxed) == 0 {
        std::thread::yield_now();
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let start = Instant::now();
    let deadline = start + pass.warmup + pass.measured;
    let (before, after, latencies) = runtime.block_on(async {
        let mut tasks = Vec::new();
        for producer in 0..pass.producers {
            let tx = tx.clone();
            let counters = counters.clone();
            let sequence = sequence.clone();
            let counter_keys = pass.counter_keys;
            let mut random = Random::new(pass.seed ^ ((producer as u64 + 1) << 32));
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut keys = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    let key = if counter_keys {
                        counter_key(sequence.fetch_add(1, Relaxed))
                    } else {
                        random.key()
                    };
                    let fingerprint = random.fingerprint();
                    let Some(Outcome::Reserved(lease)) =
                        call(&tx, Job::Reserve { key, fingerprint }).await
                    else {
                        continue;
                    };
                    if !matches!(
                        call(&tx, Job::Complete { key, lease }).await,
                        Some(Outcome::Completed)
                    ) {
                        continue;
                    }
                    counters.requests.fetch_add(1, Relaxed);
                    latencies.push(started.elapsed());
                    if latencies.len() % 16 == 0 {
                        keys.push(key);
                    }
                }
                (latencies, keys)
            }));
        }
        tokio::time::sleep(pass.warmup).await;
        let before = Snapshot::take(&counters);
        tokio::time::sleep_until(deadline.into()).await;
        let after = Snapshot::take(&counters);
        let mut latencies = Vec::new();
        for task in tasks {
            if let Ok((l, keys)) = task.await {
                latencies.extend(l);
                let mut written = written.lock().unwrap_or_else(|e| e.into_inner());
                let room = 100_000usize.saturating_sub(written.len());
                written.extend(keys.into_iter().take(room));
            }
        }
        (before, after, latencies)
    });
    drop(tx);
    let engine = writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer thread panicked"))??;
    let mut latencies = latencies;
    latencies.sort();
    let p99 = latencies
        .get(latencies.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or_default();
    let stats = WriteStats {
        seconds: (after.at - before.at).as_secs_f64(),
        requests: after.requests - before.requests,
        batches: after.batches - before.batches,
        syncs: after.syncs - before.syncs,
        jobs: after.jobs - before.jobs,
        write_bytes: after.write_bytes - before.write_bytes,
        process_cpu: after.process_cpu - before.process_cpu,
        writer_cpu: after.writer_cpu - before.writer_cpu,
        writer_system_cpu: after.writer_system_cpu - before.writer_system_cpu,
        producers_cpu: after.producers_cpu - before.producers_cpu,
        p99,
        written: latencies.len() as u64,
    };
    Ok((engine, stats))
}

fn counter_key(n: u64) -> Key {
    let mut key = [b'0'; 36];
    let digits = format!("{n:036}");
    key.copy_from_slice(&digits.as_bytes()[digits.len() - 36..]);
    key
}

async fn call(tx: &std::sync::mpsc::Sender<Queued>, job: Job) -> Option<Outcome> {
    let (reply, answer) = oneshot::channel();
    tx.send((job, reply)).ok()?;
    answer.await.ok()
}

fn writer(
    mut engine: Box<dyn Engine>,
    jobs: Receiver<Queued>,
    counters: &Counters,
) -> anyhow::Result<Box<dyn Engine>> {
    counters
        .writer_tid
        .store(measure::this_thread_id(), Relaxed);
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<oneshot::Sender<Outcome>> = Vec::with_capacity(MAX_BATCH);
    let mut outcomes = Vec::with_capacity(MAX_BATCH);
    while let Ok((job, reply)) = jobs.recv() {
        batch.push(job);
        replies.push(reply);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok((job, reply)) => {
                    batch.push(job);
                    replies.push(reply);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        outcomes.clear();
        engine.run_batch(&batch, now_ms(), &mut outcomes)?;
        anyhow::ensure!(outcomes.len() == batch.len(), "an outcome per job");
        let mut rest = Vec::with_capacity(replies.len());
        for (reply, outcome) in replies.drain(..).zip(outcomes.iter().copied()) {
            // A new lease leaves between the commit and the sync, as the
            // gateway's does; everything else after the sync.
            if !engine.commit_syncs() && matches!(outcome, Outcome::Reserved(_)) {
                let _ = reply.send(outcome);
            } else {
                rest.push((reply, outcome));
            }
        }
        engine.sync()?;
        for (reply, outcome) in rest {
            let _ = reply.send(outcome);
        }
        counters.batches.fetch_add(1, Relaxed);
        counters.syncs.fetch_add(1, Relaxed);
        counters.jobs.fetch_add(batch.len() as u64, Relaxed);
        batch.clear();
    }
    Ok(engine)
}

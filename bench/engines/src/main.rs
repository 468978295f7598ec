//! Replays the embedded store's write pattern on candidate engines, side by
//! side in one run (README.md; docs/adr/0008-embedded-engine.md).

mod cow_btree;
mod engine;
mod lsm;
mod measure;
mod record;
mod sqlite;
mod workload;
mod write_pass;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use engine::Engine;
use workload::Key;
use write_pass::{Pass, WriteStats};

/// Every candidate, by the name `--engines` takes.
const CANDIDATES: &[&str] = &[
    "sqlite",
    "sqlite-cache",
    "sqlite-blob",
    "sqlite-1k",
    "sqlite-2k",
    "sqlite-8k",
    "fjall",
    "redb",
];

fn open(name: &str, dir: &Path) -> anyhow::Result<Box<dyn Engine>> {
    const MIB: i64 = 1024;
    Ok(match name {
        "sqlite" => Box::new(sqlite::Sqlite::open(dir, sqlite::TODAY)?),
        "sqlite-cache" => Box::new(sqlite::Sqlite::open(
            dir,
            sqlite::Layout {
                cache_kib: Some(64 * MIB),
                mmap_bytes: Some(1 << 30),
                ..sqlite::TODAY
            },
        )?),
        "sqlite-blob" => Box::new(sqlite::Sqlite::open(
            dir,
            sqlite::Layout {
                blob_hashes: true,
                cache_kib: Some(64 * MIB),
                mmap_bytes: None,
                page_bytes: None,
            },
        )?),
        "sqlite-1k" | "sqlite-2k" | "sqlite-8k" => Box::new(sqlite::Sqlite::open(
            dir,
            sqlite::Layout {
                page_bytes: Some(match name {
                    "sqlite-1k" => 1024,
                    "sqlite-2k" => 2048,
                    _ => 8192,
                }),
                ..sqlite::TODAY
            },
        )?),
        "fjall" => Box::new(lsm::Fjall::open(dir)?),
        "redb" => Box::new(cow_btree::Redb::open(dir)?),
        other => anyhow::bail!("unknown engine {other}; one of {}", CANDIDATES.join(", ")),
    })
}

struct Args {
    dir: PathBuf,
    records: u64,
    engines: Vec<String>,
    rounds: usize,
    pass: Pass,
    replay: Duration,
    sweep: Duration,
    keep: bool,
    /// Use the stores a `--keep` run left at this size instead of prefilling.
    reuse: bool,
}

fn parse() -> anyhow::Result<Args> {
    let mut args = Args {
        dir: std::env::temp_dir().join("engine-bench"),
        records: 0,
        engines: CANDIDATES.iter().map(|s| s.to_string()).collect(),
        rounds: 3,
        pass: Pass {
            producers: 64,
            counter_keys: false,
            warmup: Duration::from_secs(2),
            measured: Duration::from_secs(10),
            seed: 1,
        },
        replay: Duration::from_secs(5),
        sweep: Duration::from_secs(5),
        keep: false,
        reuse: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--keep" {
            args.keep = true;
            continue;
        }
        if flag == "--reuse" {
            args.reuse = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        let seconds =
            |v: &str| -> anyhow::Result<Duration> { Ok(Duration::from_secs_f64(v.parse()?)) };
        match flag.as_str() {
            "--dir" => args.dir = value.into(),
            "--records" => args.records = value.replace('_', "").parse()?,
            "--engines" => args.engines = value.split(',').map(str::to_owned).collect(),
            "--rounds" => args.rounds = value.parse()?,
            "--producers" => args.pass.producers = value.parse()?,
            "--keys" => {
                args.pass.counter_keys = match value.as_str() {
                    "uuid" => false,
                    "counter" => true,
                    other => anyhow::bail!("--keys {other}: uuid or counter"),
                }
            }
            "--seconds" => args.pass.measured = seconds(&value)?,
            "--warmup" => args.pass.warmup = seconds(&value)?,
            "--replay-seconds" => args.replay = seconds(&value)?,
            "--sweep-seconds" => args.sweep = seconds(&value)?,
            other => anyhow::bail!("unknown option {other} (see README.md)"),
        }
    }
    for name in &args.engines {
        anyhow::ensure!(CANDIDATES.contains(&name.as_str()), "unknown engine {name}");
    }
    // Stores a `--keep` run left hold the keys of its seeds (1, 1001, ...):
    // the same seeds again would find every key taken. A seed drawn from the
    // clock, shared by every candidate of this run, stays below 2^24 so
    // that counter keys (`seed << 40`) stay apart.
    if args.reuse {
        let drawn = (workload::now_ms() / 1000).rem_euclid(15_000) as u64;
        args.pass.seed = 1 + 1_000 * (1_000 + drawn);
    }
    Ok(args)
}

#[derive(Default)]
struct Results {
    prefill_s: f64,
    rounds: Vec<WriteStats>,
    written: u64,
    disk_bytes: u64,
    replay_per_s: f64,
    replay_cpu_us: f64,
    replay_missed: usize,
    sweep_per_s: f64,
    sweep_cpu_us: f64,
    sweep_syncs_per_s: f64,
}

fn main() -> anyhow::Result<()> {
    let args = parse()?;
    std::fs::create_dir_all(&args.dir)?;
    let dir_of = |name: &str| args.dir.join(format!("{name}-{}", args.records));
    let mut results: Vec<Results> = args.engines.iter().map(|_| Results::default()).collect();
    let written: Vec<Mutex<Vec<Key>>> = args.engines.iter().map(|_| Mutex::default()).collect();

    let now = workload::now_ms();
    for (i, name) in args.engines.iter().enumerate() {
        let dir = dir_of(name);
        let started = Instant::now();
        if !args.reuse {
            let _ = std::fs::remove_dir_all(&dir);
            let mut engine = open(name, &dir)?;
            engine.prefill(&mut workload::prefilled(args.records, now))?;
            drop(engine);
            results[i].prefill_s = started.elapsed().as_secs_f64();
        }
        let settling = Instant::now();
        let mut engine = open(name, &dir)?;
        engine.settle()?;
        drop(engine);
        measure::settle();
        eprintln!(
            "prefill {name}: {} records in {:.1} s, then {:.1} s until its background work was done, {} MB on disk",
            args.records,
            results[i].prefill_s,
            settling.elapsed().as_secs_f64(),
            measure::disk_bytes(&dir) / 1_000_000
        );
    }

    // Rounds interleave the candidates, each round in another order, so
    // that their ratios share the machine's drift.
    for round in 0..args.rounds {
        for k in 0..args.engines.len() {
            let i = (k + round) % args.engines.len();
            let name = &args.engines[i];
            let engine = open(name, &dir_of(name))?;
            let pass = Pass {
                seed: args.pass.seed + (round as u64) * 1000 + i as u64,
                ..args.pass
            };
            let (engine, stats) = write_pass::run(engine, &pass, &written[i])?;
            drop(engine);
            measure::settle();
            eprintln!("round {} {name}: {}", round + 1, row_of(&stats));
            results[i].written += stats.written;
            results[i].rounds.push(stats);
        }
    }

    for (i, name) in args.engines.iter().enumerate() {
        let dir = dir_of(name);
        results[i].disk_bytes = measure::disk_bytes(&dir);
        let mut keys = workload::prefilled_sample(args.records, (args.records / 100_000).max(1));
        keys.extend(written[i].lock().unwrap_or_else(|e| e.into_inner()).iter());
        shuffle(&mut keys);
        let mut engine = open(name, &dir)?;
        let cpu = measure::process_cpu();
        let (per_s, missed) = replay(engine.as_mut(), &keys, args.replay)?;
        results[i].replay_cpu_us = (measure::process_cpu() - cpu).as_secs_f64() * 1e6
            / (per_s * args.replay.as_secs_f64());
        results[i].replay_per_s = per_s;
        results[i].replay_missed = missed;
        let started = Instant::now();
        let cpu = measure::process_cpu();
        let (mut deleted, mut batches) = (0, 0);
        while started.elapsed() < args.sweep {
            let n = engine.sweep(1000)?;
            deleted += n;
            batches += 1;
            if n == 0 {
                break;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        results[i].sweep_per_s = deleted as f64 / seconds;
        results[i].sweep_cpu_us =
            (measure::process_cpu() - cpu).as_secs_f64() * 1e6 / deleted.max(1) as f64;
        results[i].sweep_syncs_per_s = batches as f64 / seconds;
        drop(engine);
        measure::settle();
    }

    print_table(&args, &results);
    if !args.keep {
        for name in &args.engines {
            let _ = std::fs::remove_dir_all(dir_of(name));
        }
    }
    Ok(())
}

/// Point reads in groups of 16 per read transaction, for `time`.
fn replay(engine: &mut dyn Engine, keys: &[Key], time: Duration) -> anyhow::Result<(f64, usize)> {
    anyhow::ensure!(!keys.is_empty(), "no keys to replay");
    let started = Instant::now();
    let (mut done, mut missed, mut at) = (0usize, 0usize, 0usize);
    while started.elapsed() < time {
        let end = (at + 16).min(keys.len());
        let found = engine.lookup(&keys[at..end])?;
        missed += (end - at) - found;
        done += end - at;
        at = if end == keys.len() { 0 } else { end };
    }
    Ok((done as f64 / started.elapsed().as_secs_f64(), missed))
}

fn shuffle(keys: &mut [Key]) {
    let mut random = workload::Random::new(7);
    for i in (1..keys.len()).rev() {
        let j = (random.next_u64() % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
}

fn row_of(s: &WriteStats) -> String {
    format!(
        "{:.0} req/s, {:.1} CPU µs/req (writer {:.1} of which kernel {:.1}, producers {:.1}), {:.0} fsyncs/s, \
         {:.1} jobs/batch, {:.0} disk B/req, p99 {:.1} ms",
        s.per_second(s.requests),
        s.per_request_us(s.process_cpu),
        s.per_request_us(s.writer_cpu),
        s.per_request_us(s.writer_system_cpu),
        s.per_request_us(s.producers_cpu),
        s.per_second(s.syncs),
        s.jobs as f64 / s.batches.max(1) as f64,
        s.write_bytes as f64 / s.requests.max(1) as f64,
        s.p99.as_secs_f64() * 1e3,
    )
}

fn print_table(args: &Args, results: &[Results]) {
    println!(
        "\n{} keys; {} records prefilled; {} producers; {} rounds of {:.0} s (after {:.0} s warm-up), \
         candidates interleaved; the row is each candidate's median round by req/s.\n",
        if args.pass.counter_keys {
            "counter"
        } else {
            "UUID v4"
        },
        args.records,
        args.pass.producers,
        args.rounds,
        args.pass.measured.as_secs_f64(),
        args.pass.warmup.as_secs_f64(),
    );
    println!(
        "| engine | records | req/s | rounds' req/s | CPU µs/req | writer µs/req (kernel) | fsyncs/s | jobs/batch | disk write B/req | p99 ms | disk B/record | replay lookups/s | replay CPU µs/lookup | sweep records/s (batches of 1000, synced) | sweep CPU µs/record | prefill s |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, r) in args.engines.iter().zip(results) {
        let mut order: Vec<&WriteStats> = r.rounds.iter().collect();
        order.sort_by(|a, b| {
            a.per_second(a.requests)
                .total_cmp(&b.per_second(b.requests))
        });
        let Some(m) = order.get(order.len().saturating_sub(1) / 2) else {
            continue;
        };
        let all: Vec<String> = r
            .rounds
            .iter()
            .map(|s| format!("{:.0}", s.per_second(s.requests)))
            .collect();
        let records = args.records + r.written;
        println!(
            "| {name} | {} | {:.0} | {} | {:.1} | {:.1} ({:.1}) | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {:.0}{} | {:.1} | {:.0} | {:.1} | {:.1} |",
            records,
            m.per_second(m.requests),
            all.join(" / "),
            m.per_request_us(m.process_cpu),
            m.per_request_us(m.writer_cpu),
            m.per_request_us(m.writer_system_cpu),
            m.per_second(m.syncs),
            m.jobs as f64 / m.batches.max(1) as f64,
            m.write_bytes as f64 / m.requests.max(1) as f64,
            m.p99.as_secs_f64() * 1e3,
            r.disk_bytes as f64 / records.max(1) as f64,
            r.replay_per_s,
            if r.replay_missed > 0 {
                format!(" ({} missed)", r.replay_missed)
            } else {
                String::new()
            },
            r.replay_cpu_us,
            r.sweep_per_s,
            r.sweep_cpu_us,
            r.prefill_s,
        );
    }
}

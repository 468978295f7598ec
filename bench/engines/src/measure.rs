//! What the kernel counts for this process: bytes it caused to be written
//! to disk, CPU time of the process and of single threads, and the disk
//! space a store takes.

use std::path::Path;
use std::time::Duration;

/// `write_bytes` of /proc/self/io: bytes this process (every thread, the
/// engines' own background threads too) caused to be sent to the disk,
/// counted when a page is dirtied.
pub fn write_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// User + system time of the whole process, every thread that ever ran in
/// it (/proc/self/stat, in clock ticks of 10 ms).
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// System (kernel) time of thread `tid` of this process (its stat, in clock
/// ticks of 10 ms): the syncs' and writes' share of its CPU time.
pub fn thread_system_cpu(tid: u64) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let stime = rest
        .split_whitespace()
        .nth(12)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_millis(stime * 10)
}

/// CPU time of the calling thread, in nanoseconds (schedstat).
pub fn this_thread_cpu() -> Duration {
    schedstat("/proc/thread-self/schedstat")
}

/// CPU time of thread `tid` of this process.
pub fn thread_cpu(tid: u64) -> Duration {
    schedstat(&format!("/proc/self/task/{tid}/schedstat"))
}

/// The calling thread's id.
pub fn this_thread_id() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

fn schedstat(path: &str) -> Duration {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// Bytes of disk a directory's files take (allocated blocks, not lengths:
/// a sparse or preallocated file counts what it holds).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Every dirty page of the machine written out, so that one candidate's
/// writeback does not run during the next one's measurement.
pub fn settle() {
    let _ = std::process::Command::new("sync").status();
}

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Client;
use super::config::Template;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "idemgate-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TestDir(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port on 127.0.0.1 that no listener holds, below the kernel's ephemeral
/// range: a port the kernel hands out for port 0 can become the local port of
/// any outgoing connection between this check and the gateway's bind (seen in
/// CI as "Address already in use"), and again between a stop and a restart on
/// the same port. One below that range is only ever taken by a listener.
pub fn free_port() -> SocketAddr {
    free_listener().local_addr().unwrap()
}

/// A listener on a port chosen as `free_port` chooses, kept bound: a test
/// that listens in its own process takes this one, so no other process can
/// take the port between the check and the bind.
pub fn free_listener() -> TcpListener {
    const LOWEST: u64 = 10_000;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let highest = ephemeral_start().max(LOWEST + 1_000);
    let span = highest - LOWEST;
    // A different start per process, chosen once; ports then follow one
    // another, so the tests of one process never pick the same one.
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        u64::from(std::process::id()).wrapping_mul(7_919)
            + std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |t| u64::from(t.subsec_nanos()))
    });
    for _ in 0..span {
        let offset = start.wrapping_add(NEXT.fetch_add(1, Ordering::SeqCst)) % span;
        let Ok(port) = u16::try_from(LOWEST + offset) else {
            continue;
        };
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return listener;
        }
    }
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// The first port of the kernel's ephemeral range (Linux: 32768 by default).
fn ephemeral_start() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The real binary, serving a config written into a test directory.
pub struct GatewayProcess {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    envs: Vec<(String, String)>,
    /// Given before `serve` (`--log-format json`).
    args: Vec<String>,
    /// What `render` put for `{upstream}` and `{db}`: `write_config` puts
    /// them again.
    upstream: String,
    db: PathBuf,
}

/// Replaces `{listen}`, `{admin}`, `{db}` and `{upstream}` in a config template.
pub fn render(
    template: &(impl Template + ?Sized),
    dir: &TestDir,
    upstream: &str,
    listen: SocketAddr,
    admin: SocketAddr,
) -> String {
    fill(template, upstream, &dir.path("store.db"), listen, admin)
}

fn fill(
    template: &(impl Template + ?Sized),
    upstream: &str,
    db: &Path,
    listen: SocketAddr,
    admin: SocketAddr,
) -> String {
    template
        .template()
        .replace("{listen}", &listen.to_string())
        .replace("{admin}", &admin.to_string())
        .replace("{db}", &db.display().to_string())
        .replace("{upstream}", upstream)
}

impl GatewayProcess {
    pub fn start(
        dir: &TestDir,
        upstream: &str,
        template: &(impl Template + ?Sized),
    ) -> GatewayProcess {
        Self::start_with_env(dir, upstream, template, &[])
    }

    /// A fresh directory, a mock upstream and a gateway on `template`: where
    /// most tests start.
    pub async fn start_fresh(
        name: &str,
        template: &(impl Template + ?Sized),
    ) -> (TestDir, super::MockUpstream, GatewayProcess) {
        let dir = TestDir::new(name);
        let upstream = super::MockUpstream::start().await;
        let gateway = Self::start(&dir, &upstream.url(), template);
        (dir, upstream, gateway)
    }

    pub fn start_with_env(
        dir: &TestDir,
        upstream: &str,
        template: &(impl Template + ?Sized),
        envs: &[(&str, &str)],
    ) -> GatewayProcess {
        // A port `free_port` saw free can be taken before the gateway binds
        // it (by any outgoing connection's ephemeral port): then new ports.
        for attempt in 1.. {
            let ports = (free_port(), free_port());
            match Self::start_at(dir, upstream, template, ports, envs) {
                Ok(process) => return process,
                Err(text) if attempt < 5 && text.contains("Address already in use") => {
                    let _ = std::fs::remove_file(dir.path("gateway.log"));
                }
                Err(text) => panic!("{text}"),
            }
        }
        unreachable!()
    }

    /// Starts the binary on `template` with `{listen}` and `{admin}` at the
    /// given addresses: for a test that names a gateway's address in another
    /// gateway's config before either starts. `Err` with the log when it
    /// exits first.
    pub fn start_at(
        dir: &TestDir,
        upstream: &str,
        template: &(impl Template + ?Sized),
        ports: (SocketAddr, SocketAddr),
        envs: &[(&str, &str)],
    ) -> Result<GatewayProcess, String> {
        Self::start_at_with_args(dir, upstream, template, ports, envs, &[])
    }

    /// `start_at`, with `args` given before `serve` (`--log-format json`).
    pub fn start_at_with_args(
        dir: &TestDir,
        upstream: &str,
        template: &(impl Template + ?Sized),
        (listen, admin): (SocketAddr, SocketAddr),
        envs: &[(&str, &str)],
        args: &[&str],
    ) -> Result<GatewayProcess, String> {
        let config = dir.path("idemgate.toml");
        std::fs::write(&config, render(template, dir, upstream, listen, admin)).unwrap();
        let mut process = GatewayProcess {
            addr: listen,
            admin,
            config,
            log: dir.path("gateway.log"),
            child: None,
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            args: args.iter().map(|arg| arg.to_string()).collect(),
            upstream: upstream.to_owned(),
            db: dir.path("store.db"),
        };
        process.try_spawn()?;
        Ok(process)
    }

    fn spawn(&mut self) {
        if let Err(text) = self.try_spawn() {
            panic!("{text}");
        }
    }

    /// Starts the process and waits until both listeners accept; `Err` with
    /// its log when it exited first.
    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let earlier_log = log.metadata().unwrap().len() as usize;
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(&self.args)
            .args(["serve", "-c"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.wait_healthy(earlier_log)
    }

    /// Until both listeners accept and this start has logged "idemgate
    /// serving" (after `earlier_log` bytes of the log): the sockets accept
    /// from the bind, before the start lines are written, and a port can
    /// also be some other process's. Generous: on a loaded machine (load 10
    /// on two cores) starts took longer than 15 s; the wait costs time only
    /// when a start fails.
    fn wait_healthy(&mut self, earlier_log: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(45);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(self.admin).is_ok()
                && std::net::TcpStream::connect(self.addr).is_ok()
                && self
                    .log_text()
                    .get(earlier_log..)
                    .is_some_and(|log| log.contains("idemgate serving"))
            {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "gateway exited at start ({status}):\n{}",
                    self.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("gateway did not start:\n{}", self.log_text()))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The first log line containing `needle`, waiting up to `within` for
    /// it: a line the gateway writes after what the test saw (a connection's
    /// end logged once its socket is closed) may come a moment later.
    pub async fn logged_line(&self, needle: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let log = self.log_text();
            if let Some(line) = log.lines().find(|line| line.contains(needle)) {
                return Some(line.to_string());
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }

    pub fn admin_client(&self) -> Client {
        Client::new(self.admin)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL: the process dies mid-whatever, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// SIGHUP, then waits until the gateway has counted its `n`th applied
    /// reload (`idemgate_config_reloads_total{result="ok"}`).
    pub async fn reload_by_signal(&self, n: u32) {
        self.signal("HUP");
        let applied = format!("idemgate_config_reloads_total{{result=\"ok\"}} {n}\n");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self
            .admin_client()
            .get("/metrics")
            .await
            .text()
            .contains(&applied)
        {
            assert!(
                Instant::now() < deadline,
                "reload {n} not applied:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("not running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "gateway did not exit in {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits (off the runtime's threads) for a clean exit
    /// within `limit`.
    pub async fn terminate_within(mut self, limit: Duration) {
        let asked = Instant::now();
        self.signal("TERM");
        let status = tokio::task::spawn_blocking(move || self.wait_exit(limit + limit))
            .await
            .expect("waited");
        assert!(status.success(), "{status:?}");
        let took = asked.elapsed();
        assert!(took < limit, "exited {took:?} after SIGTERM");
    }

    /// Starts the same binary again on the same config, ports and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Resident memory of the process now (`VmRSS`) or at its peak (`VmHWM`), in KiB.
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// `idemgate_buffered_body_bytes` now: request bodies and keyed
    /// answers held in memory.
    pub async fn buffered_body_bytes(&self) -> u64 {
        let metrics = self.admin_client().get("/metrics").await.text();
        metrics
            .lines()
            .find_map(|line| line.strip_prefix("idemgate_buffered_body_bytes "))
            .and_then(|n| n.parse().ok())
            .expect("idemgate_buffered_body_bytes")
    }

    /// Waits (at most 10 s) until no body is held: a connection lets go of
    /// an answer a moment after its client has it, or has left.
    pub async fn until_no_body_held(&self, what: &str) {
        let started = Instant::now();
        while self.buffered_body_bytes().await > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what}: bytes never given back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (at most 10 s) until `idemgate_inflight`, over every route,
    /// reads `executions`: keyed requests running, sent or still waiting
    /// for a connection.
    pub async fn until_inflight(&self, executions: u64) {
        let started = Instant::now();
        loop {
            let metrics = self.admin_client().get("/metrics").await.text();
            let now: u64 = metrics
                .lines()
                .filter(|line| line.starts_with("idemgate_inflight"))
                .filter_map(|line| line.rsplit_once(' ')?.1.parse::<u64>().ok())
                .sum();
            if now == executions {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "idemgate_inflight stayed at {now}, not {executions}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Writes `template` as this gateway's config file, on its own ports,
    /// upstream and store (for a reload or a restart to read).
    pub fn write_config(&self, template: &(impl Template + ?Sized)) {
        let text = fill(template, &self.upstream, &self.db, self.addr, self.admin);
        std::fs::write(&self.config, text).unwrap();
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `signal` (`"TERM"`, `"INT"`, `"HUP"`) to process `pid`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

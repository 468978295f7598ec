//! The Redis connection: short deadlines, reconnects by itself, and a pause
//! after a failure so a down Redis costs requests nothing.
//!
//! Every call is bounded by `TIMEOUT`. After a failure to reach it (an
//! error reply about one command is not one), Redis is skipped for
//! `PAUSE` (each skipped call is a failure to its caller, counted as a cache
//! error) and then tried again; the connection manager reconnects on that try.
//! So an outage costs one timeout per `PAUSE`, not one per request.
//!
//! A call that gets no answer within `TIMEOUT` also drops the connection it
//! was sent on: the next try opens a new one. The connection manager
//! reconnects only when a connection fails, and one that merely goes silent
//! (Redis's host gone without a reset, a stuck proxy or NAT entry, an
//! address moved by a failover) fails only when the kernel gives up on it,
//! many minutes later or never: until then every try would wait out its
//! deadline on it while a new connection would be answered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, ConnectionAddr};

use super::cause::{CacheError, RedisCause};
use crate::log_limit::LogLimit;
use crate::store::StoreError;

const TIMEOUT: Duration = Duration::from_millis(200);
const PAUSE: Duration = Duration::from_secs(1);
/// Before the connection manager's one retry of a failed connect: short, so
/// that both tries fit in `TIMEOUT` and the failure is said as it is (a
/// refused connection, a certificate not trusted), not as a timeout.
const RETRY_DELAY: Duration = Duration::from_millis(10);

/// What a GET found under a key.
pub enum Got {
    Value(Vec<u8>),
    Nothing,
    /// A value of another type than a string (Redis answered `WRONGTYPE`):
    /// never one of ours.
    NotAString,
}

/// Writes `ARGV[2]` with a TTL of `ARGV[3]` ms when the key holds nothing,
/// exactly `ARGV[1]` (the unusable value a lookup saw), or a value that is not
/// a string; anything else (a value written meanwhile) is kept. Atomic, so an
/// answer a completion wrote after the lookup is never overwritten.
const REPLACE: &str = "local cur = redis.pcall('GET', KEYS[1]) \
if cur == false or cur == ARGV[1] or (type(cur) == 'table' and cur.err) then \
return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end \
return false";

pub struct Redis {
    client: redis::Client,
    /// The URL's host and port (never its password), named in errors: the
    /// client's own text says "failed to lookup address information" or
    /// "Connection refused" without saying what.
    target: Arc<str>,
    /// The connection calls are sent on, and how many were dropped before
    /// it (so that the calls that time out together on one replace it once).
    current: Mutex<(u64, ConnectionManager)>,
    started: Instant,
    /// Milliseconds since `started` before which Redis is not tried (0: try).
    paused_until: AtomicU64,
}

impl Redis {
    /// Does not connect: a Redis that is down at start must not stop the
    /// gateway (Postgres is the authority), it is simply not used until it answers.
    pub fn lazy(url: &str, ca: Option<&std::path::Path>) -> Result<Redis, StoreError> {
        let client = super::tls::client(url, ca)?;
        let manager = connection(&client).map_err(|e| RedisCause::Client(e.kind()))?;
        Ok(Redis {
            target: target(client.get_connection_info().addr()).into(),
            client,
            current: Mutex::new((0, manager)),
            started: Instant::now(),
            paused_until: AtomicU64::new(0),
        })
    }

    pub async fn get(&self, key: &str) -> Result<Got, CacheError> {
        let found = self
            .run(|mut conn| async move {
                match conn.get::<_, Option<Vec<u8>>>(key).await {
                    Ok(Some(value)) => Ok(Got::Value(value)),
                    Ok(None) => Ok(Got::Nothing),
                    Err(e) if e.code() == Some("WRONGTYPE") => Ok(Got::NotAString),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(found)
    }

    /// SET with a TTL; with `only_new`, keeps an existing value (NX).
    pub async fn set(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
        only_new: bool,
    ) -> Result<(), CacheError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value).arg("PX").arg(ms);
        if only_new {
            cmd.arg("NX");
        }
        // NX answers nil when the key exists: not an error.
        self.run(|mut conn| async move { cmd.query_async::<Option<String>>(&mut conn).await })
            .await
            .map(|_| ())
    }

    /// SET with a TTL over what a lookup found unusable (`seen`: the value
    /// it read, or anything when it was not a string), but never over a value
    /// written since (see `REPLACE`).
    pub async fn replace(
        &self,
        key: &str,
        seen: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(REPLACE)
            .arg(1)
            .arg(key)
            .arg(seen)
            .arg(value)
            .arg(ms);
        self.run(|mut conn| async move { cmd.query_async::<redis::Value>(&mut conn).await })
            .await
            .map(|_| ())
    }

    /// Puts `value` under each of `keys` for `ttl`, over whatever is there,
    /// in one round trip.
    pub async fn set_all(
        &self,
        keys: &[String],
        value: &[u8],
        ttl: Duration,
    ) -> Result<(), CacheError> {
        if keys.is_empty() {
            return Ok(());
        }
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(ms)
                .ignore();
        }
        self.run(|mut conn| async move { pipe.query_async::<()>(&mut conn).await })
            .await
    }

    async fn run<T, F>(&self, call: impl FnOnce(ConnectionManager) -> F) -> Result<T, CacheError>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        let now = self.elapsed_ms();
        if now < self.paused_until.load(Ordering::Relaxed) {
            return Err(CacheError::Paused);
        }
        let (generation, conn) = self.connection();
        let result = match tokio::time::timeout(TIMEOUT, call(conn)).await {
            Ok(Ok(value)) => return Ok(value),
            // Redis answered, with an error about this one command (a value
            // of another type under the key, OOM on a write): it is up, and
            // pausing would skip every other key's lookup for nothing.
            Ok(Err(e)) if answered(&e) => {
                warn_refused(&e);
                return Err(CacheError::Refused(e));
            }
            // The client's own deadline (the same) may fire first.
            Ok(Err(e)) if e.is_timeout() => {
                self.drop_connection(generation);
                self.failed(e)
            }
            Ok(Err(e)) => self.failed(e),
            Err(_) => {
                self.drop_connection(generation);
                CacheError::NoAnswer {
                    target: self.target.clone(),
                    after: TIMEOUT,
                }
            }
        };
        let until = now.saturating_add(u64::try_from(PAUSE.as_millis()).unwrap_or(u64::MAX));
        // Once per pause at most, not once per request; and an outage that
        // lasts, tried again every pause, at once and then once per interval
        // (crate::log_limit), not once a second for as long as it lasts.
        if self.paused_until.swap(until, Ordering::Relaxed) <= now {
            static LIMIT: LogLimit = LogLimit::uncounted();
            if let Some(left_out) = LIMIT.admit("unavailable") {
                tracing::warn!(error = %result, pause = ?PAUSE, not_logged = left_out.count(),
                    "redis unavailable; serving from postgres{left_out}");
            }
        }
        Err(result)
    }

    fn failed(&self, source: redis::RedisError) -> CacheError {
        CacheError::Failed {
            target: self.target.clone(),
            source,
        }
    }

    fn connection(&self) -> (u64, ConnectionManager) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces connection `generation` (if no call replaced it already)
    /// with one that connects on its first call. The old one closes once
    /// the calls still waiting on it give up.
    fn drop_connection(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != generation {
            return;
        }
        match connection(&self.client) {
            Ok(fresh) => *current = (generation + 1, fresh),
            // Not seen in practice (the same settings made the first one);
            // the old connection then stays, as it would without this.
            Err(error) => tracing::debug!(%error, "redis: no new connection made"),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// `host:port`, `[v6]:port`.
fn target(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. }
            if host.contains(':') =>
        {
            format!("[{host}]:{port}")
        }
        other => other.to_string(),
    }
}

/// A connection manager that connects on its first call, with the deadlines
/// above.
fn connection(client: &redis::Client) -> redis::RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(1)
        .set_min_delay(RETRY_DELAY)
        .set_max_delay(PAUSE);
    ConnectionManager::new_lazy_with_config(client.clone(), config)
}

/// Logs an error reply at once and then once per interval for each kind
/// (`NOAUTH`, `OOM`, `READONLY`, ...; crate::log_limit): such a reply comes
/// back on every call while its cause lasts and pauses nothing, so without a
/// line a Redis the gateway may not use (a password it lacks, memory full
/// under `noeviction`) would only show as a fast path that never hits.
fn warn_refused(e: &redis::RedisError) {
    static LIMIT: LogLimit = LogLimit::uncounted();
    if let Some(left_out) = LIMIT.admit(e.code().unwrap_or("error")) {
        tracing::warn!(error = %e, not_logged = left_out.count(),
            "redis refused a command; serving from postgres{left_out}");
    }
}

/// An error reply from the server (`WRONGTYPE`, `OOM`, ...), as opposed to a
/// connection that failed, timed out or was refused.
fn answered(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    ) && !e.is_io_error()
        && !e.is_connection_dropped()
        && !e.is_connection_refusal()
        && !e.is_timeout()
}

#[cfg(test)]
mod tests {
    /// The host and port errors name: an IPv6 address in brackets, as in
    /// the URL; never the password.
    #[test]
    fn the_target_is_the_urls_host_and_port() {
        for (url, expected) in [
            ("redis://:pw@cache.internal:6380/2", "cache.internal:6380"),
            ("rediss://u:pw@[::1]/", "[::1]:6379"),
            ("redis://127.0.0.1", "127.0.0.1:6379"),
        ] {
            let client = redis::Client::open(url).unwrap();
            assert_eq!(super::target(client.get_connection_info().addr()), expected);
        }
    }
}

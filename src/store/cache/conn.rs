//! The Redis connection: short deadlines, reconnects by itself, and a pause
//! after a failure so a down Redis costs requests nothing.
//!
//! Every call is bounded by `TIMEOUT`. After a failure to reach it (an
//! error reply about one command is not one), Redis is skipped for
//! `PAUSE` (each skipped call is a failure to its caller, counted as a cache
//! error) and then tried again; the connection manager reconnects on that try.
//! So an outage costs one timeout per `PAUSE`, not one per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

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
    manager: ConnectionManager,
    started: Instant,
    /// Milliseconds since `started` before which Redis is not tried (0: try).
    paused_until: AtomicU64,
}

impl Redis {
    /// Does not connect: a Redis that is down at start must not stop the
    /// gateway (Postgres is the authority), it is simply not used until it answers.
    pub fn lazy(url: &str, ca: Option<&std::path::Path>) -> Result<Redis, StoreError> {
        let client = super::tls::client(url, ca)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(RETRY_DELAY)
            .set_max_delay(PAUSE);
        let manager = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| RedisCause::Client(e.kind()))?;
        Ok(Redis {
            manager,
            started: Instant::now(),
            paused_until: AtomicU64::new(0),
        })
    }

    pub async fn get(&self, key: &str) -> Result<Got, CacheError> {
        let mut conn = self.manager.clone();
        let found = self
            .run(async move {
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
        let mut conn = self.manager.clone();
        // NX answers nil when the key exists: not an error.
        self.run(async move { cmd.query_async::<Option<String>>(&mut conn).await })
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
        let mut conn = self.manager.clone();
        self.run(async move { cmd.query_async::<redis::Value>(&mut conn).await })
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
        let mut conn = self.manager.clone();
        self.run(async move { pipe.query_async::<()>(&mut conn).await })
            .await
    }

    async fn run<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, CacheError> {
        let now = self.elapsed_ms();
        if now < self.paused_until.load(Ordering::Relaxed) {
            return Err(CacheError::Paused);
        }
        let result = match tokio::time::timeout(TIMEOUT, call).await {
            Ok(Ok(value)) => return Ok(value),
            // Redis answered, with an error about this one command (a value
            // of another type under the key, OOM on a write): it is up, and
            // pausing would skip every other key's lookup for nothing.
            Ok(Err(e)) if answered(&e) => {
                warn_refused(&e);
                return Err(CacheError::Failed(e));
            }
            Ok(Err(e)) => CacheError::Failed(e),
            Err(_) => CacheError::NoAnswer(TIMEOUT),
        };
        let until = now.saturating_add(u64::try_from(PAUSE.as_millis()).unwrap_or(u64::MAX));
        // Log once per pause, not once per request.
        if self.paused_until.swap(until, Ordering::Relaxed) <= now {
            tracing::warn!(error = %result, pause = ?PAUSE, "redis unavailable; serving from postgres");
        }
        Err(result)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
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

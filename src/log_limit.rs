//! Log lines for failures that can repeat on every request (an upstream
//! that refuses connections, an answer no configured key opens): without a
//! bound, a gateway taking thousands of requests a second writes as many
//! WARN or ERROR lines exactly when an outage needs its logs read.
//!
//! Each kind of failure is one [`LogLimit`], and each place it happens (a
//! route, a region) keeps its own window: the first occurrence is logged at
//! once with its cause, then at most one line per [`INTERVAL`], which says
//! how many were left out since the last one. A failure that goes on is
//! still logged every interval; the metrics count every occurrence. Events
//! an operator audits one by one (purges, reloads, start and stop) do not
//! go through here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most one line per kind of failure and place in this time.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Places kept per kind: routes and regions come from the config, so this
/// is never reached in practice; past it, the others share one window.
const MAX_PLACES: usize = 1024;
const OTHER_PLACES: &str = "…";

/// One kind of failure, with a window per place.
pub struct LogLimit {
    /// The metric that counts every occurrence, named in the lines.
    counted_in: Option<&'static str>,
    places: Mutex<BTreeMap<Box<str>, Window>>,
}

struct Window {
    logged_at: Instant,
    left_out: u64,
}

impl LogLimit {
    pub const fn new(counted_in: &'static str) -> Self {
        Self {
            counted_in: Some(counted_in),
            places: Mutex::new(BTreeMap::new()),
        }
    }

    /// For a failure no metric counts: its lines give the count only.
    pub const fn uncounted() -> Self {
        Self {
            counted_in: None,
            places: Mutex::new(BTreeMap::new()),
        }
    }

    /// `Some` when this occurrence at `place` is to be logged, with what
    /// the line should add about those left out before it.
    pub fn admit(&self, place: &str) -> Option<LeftOut> {
        self.admit_at(place, Instant::now())
    }

    fn admit_at(&self, place: &str, now: Instant) -> Option<LeftOut> {
        // A panic elsewhere while the lock was held leaves counts only.
        let mut places = self.places.lock().unwrap_or_else(PoisonError::into_inner);
        let place = if places.contains_key(place) || places.len() < MAX_PLACES {
            place
        } else {
            OTHER_PLACES
        };
        let Some(window) = places.get_mut(place) else {
            places.insert(
                place.into(),
                Window {
                    logged_at: now,
                    left_out: 0,
                },
            );
            return Some(LeftOut::none(self.counted_in));
        };
        let since = now.saturating_duration_since(window.logged_at);
        if since < INTERVAL {
            window.left_out += 1;
            return None;
        }
        let left_out = LeftOut {
            count: std::mem::take(&mut window.left_out),
            since,
            counted_in: self.counted_in,
        };
        window.logged_at = now;
        Some(left_out)
    }
}

/// The occurrences not logged since the last line about this failure and
/// place. Displayed as the end of the line's message: nothing when none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeftOut {
    count: u64,
    since: Duration,
    counted_in: Option<&'static str>,
}

impl LeftOut {
    fn none(counted_in: Option<&'static str>) -> Self {
        Self {
            count: 0,
            since: Duration::ZERO,
            counted_in,
        }
    }

    /// For the line's `not_logged` field (JSON logs).
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 0 {
            // A reader who sees one line must know it may stand for many.
            let secs = INTERVAL.as_secs();
            return match self.counted_in {
                Some(metric) => write!(
                    f,
                    " (repeats in the next {secs} s are not logged; {metric} counts every one)"
                ),
                None => write!(f, " (repeats in the next {secs} s are not logged)"),
            };
        }
        let (count, secs) = (self.count, self.since.as_secs());
        match self.counted_in {
            Some(metric) => write!(
                f,
                " ({count} more in the last {secs} s not logged; {metric} counts every one)"
            ),
            None => write!(f, " ({count} more in the last {secs} s not logged)"),
        }
    }
}

/// The warnings of h2 (HTTP/2), through one [`LogLimit`] per place in its
/// code: each is about a peer (a client that resets too many streams, a
/// PING answered that was never sent) and comes once per connection, which a
/// client opens as fast as it likes. The gateway's own line for a closed
/// connection carries the count (`server/h2_flood.rs`).
pub struct DependencyWarnings;

static DEPENDENCY_WARNINGS: LogLimit = LogLimit::uncounted();

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for DependencyWarnings {
    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::WARN || !meta.target().starts_with("h2::") {
            return true;
        }
        // The event's name is its place in h2's code ("event src/…:913").
        DEPENDENCY_WARNINGS.admit(meta.name()).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRIC: &str = "idemgate_requests_total";

    #[test]
    fn the_first_is_logged_then_one_line_per_interval_with_the_count() {
        let limit = LogLimit::new(METRIC);
        let start = Instant::now();
        let first = limit
            .admit_at("charges", start)
            .expect("the first is logged");
        assert_eq!(first.count(), 0);
        assert_eq!(
            first.to_string(),
            " (repeats in the next 10 s are not logged; idemgate_requests_total counts every one)",
            "a first line says what follows it"
        );
        for ms in 1..=1_000 {
            let at = start + Duration::from_millis(ms * 9);
            assert_eq!(limit.admit_at("charges", at), None, "at {ms}");
        }
        let next = limit
            .admit_at("charges", start + INTERVAL)
            .expect("one line per interval");
        assert_eq!(next.count(), 1_000);
        assert_eq!(
            next.to_string(),
            " (1000 more in the last 10 s not logged; idemgate_requests_total counts every one)"
        );
        assert_eq!(limit.admit_at("charges", start + INTERVAL), None);
    }

    #[test]
    fn an_uncounted_kind_names_no_metric() {
        let limit = LogLimit::uncounted();
        let start = Instant::now();
        assert!(limit.admit_at("data", start).is_some());
        assert!(limit.admit_at("data", start).is_none());
        let next = limit.admit_at("data", start + INTERVAL).expect("logged");
        assert_eq!(next.to_string(), " (1 more in the last 10 s not logged)");
    }

    #[test]
    fn places_are_limited_apart() {
        let limit = LogLimit::new(METRIC);
        let now = Instant::now();
        assert!(limit.admit_at("charges", now).is_some());
        assert!(limit.admit_at("orders", now).is_some());
        assert!(limit.admit_at("charges", now).is_none());
        assert!(limit.admit_at("orders", now).is_none());
    }

    #[test]
    fn after_a_quiet_interval_the_next_is_logged_at_once_and_says_none_left_out() {
        let limit = LogLimit::new(METRIC);
        let start = Instant::now();
        assert!(limit.admit_at("charges", start).is_some());
        let later = limit
            .admit_at("charges", start + INTERVAL * 6)
            .expect("logged");
        assert_eq!(later.count(), 0);
        assert_eq!(
            later.to_string(),
            " (repeats in the next 10 s are not logged; idemgate_requests_total counts every one)"
        );
    }

    #[test]
    fn a_clock_read_before_the_last_line_counts_as_within_the_interval() {
        // Threads read `Instant::now` before taking the lock: one may come
        // in with an earlier time than the line just logged.
        let limit = LogLimit::new(METRIC);
        let now = Instant::now() + INTERVAL;
        assert!(limit.admit_at("charges", now).is_some());
        assert!(limit.admit_at("charges", now - INTERVAL).is_none());
    }

    #[test]
    fn places_past_the_bound_share_one_window() {
        let limit = LogLimit::new(METRIC);
        let now = Instant::now();
        for n in 0..MAX_PLACES {
            assert!(limit.admit_at(&format!("route-{n}"), now).is_some());
        }
        assert!(limit.admit_at("one-more", now).is_some());
        assert!(limit.admit_at("and-another", now).is_none());
        assert!(limit.admit_at("route-7", now).is_none(), "kept its own");
    }
}

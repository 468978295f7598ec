//! The signed timestamp of the schemes that have one: whole seconds since
//! the Unix epoch, accepted within the tolerance on either side of now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Rejection;

/// The accepted span of signed timestamps, in Unix seconds.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    earliest: i64,
    latest: i64,
}

impl Window {
    pub fn around(now: SystemTime, tolerance: Duration) -> Self {
        let now = match now.duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
        };
        let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
        Self {
            earliest: now.saturating_sub(tolerance),
            latest: now.saturating_add(tolerance),
        }
    }

    pub fn check(self, signed: i64) -> Result<(), Rejection> {
        if signed < self.earliest {
            Err(Rejection::TooOld)
        } else if signed > self.latest {
            Err(Rejection::TooNew)
        } else {
            Ok(())
        }
    }
}

/// Unix seconds written as decimal digits (no sign, no fraction).
pub fn parse(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_open_both_ways_up_to_the_tolerance() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let window = Window::around(now, Duration::from_secs(300));
        assert_eq!(window.check(1_000_000), Ok(()));
        assert_eq!(window.check(999_700), Ok(()));
        assert_eq!(window.check(1_000_300), Ok(()));
        assert_eq!(window.check(999_699), Err(Rejection::TooOld));
        assert_eq!(window.check(1_000_301), Err(Rejection::TooNew));
    }

    #[test]
    fn timestamps_are_plain_digits() {
        assert_eq!(parse("1614265330"), Some(1_614_265_330));
        for bad in ["", "-5", "+5", "1.5", " 5", "1e9", "99999999999999999999"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}

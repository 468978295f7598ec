//! What `idemgate_records{route,state}` reports, at a cost that stops
//! growing with the store: in-flight and outcome-unknown records exact,
//! completed records exact up to a limit per route and estimated from a
//! fixed sample past it (docs/tuning-retention.md, "The count"). Each
//! backend reads its own way; this is what they share.

use super::RecordState;
use super::listing::Count;

/// How far a count goes before it estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountLimits {
    /// A route's completed records are counted one by one up to this many;
    /// a route with more is estimated.
    pub exact_completed: u32,
    /// Pages the estimate reads: Postgres samples this many heap pages
    /// (tens of records each); the embedded store probes one record's page
    /// per position, at between this many and twice as many positions.
    pub sample_pages: u32,
}

impl Default for CountLimits {
    /// Measured warm on 10 million records (docs/tuning-retention.md): a
    /// route's range ~30 ms at the limit, the sample 56–104 ms.
    fn default() -> CountLimits {
        CountLimits {
            exact_completed: 100_000,
            sample_pages: 4_096,
        }
    }
}

/// One route's exact counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteCount {
    pub route: String,
    pub in_flight: u64,
    pub outcome_unknown: u64,
    /// `None`: more than `exact_completed`, to be estimated.
    pub completed: Option<u64>,
}

impl RouteCount {
    /// `completed` as counted up to one past the limit: reaching past the
    /// limit means "estimate".
    pub fn completed_upto(completed: u64, limits: CountLimits) -> Option<u64> {
        (completed <= u64::from(limits.exact_completed)).then_some(completed)
    }
}

/// The counts to report: a route's estimate where it had more completed
/// records than the exact limit (`sampled`: route and estimate); no zeros.
pub fn merged(
    routes: Vec<RouteCount>,
    sampled: &[(String, u64)],
    limits: CountLimits,
) -> Vec<Count> {
    let mut counts = Vec::new();
    for route in routes {
        // More than the exact limit was seen: never report fewer.
        let completed = route.completed.unwrap_or_else(|| {
            let estimate = sampled
                .iter()
                .find(|(name, _)| *name == route.route)
                .map_or(0, |(_, records)| *records);
            estimate.max(u64::from(limits.exact_completed) + 1)
        });
        for (state, records) in [
            (RecordState::InFlight, route.in_flight),
            (RecordState::Completed, completed),
            (RecordState::OutcomeUnknown, route.outcome_unknown),
        ] {
            if records > 0 {
                counts.push(Count {
                    route: route.route.clone(),
                    state,
                    records,
                });
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, completed: Option<u64>) -> RouteCount {
        RouteCount {
            route: name.into(),
            in_flight: 2,
            outcome_unknown: 0,
            completed,
        }
    }

    #[test]
    fn estimates_stand_in_past_the_limit_and_never_below_it() {
        let limits = CountLimits {
            exact_completed: 1000,
            sample_pages: 10,
        };
        let sampled = [("big".to_string(), 5_000), ("thin".to_string(), 300)];
        let counts = merged(
            vec![
                route("big", None),
                route("thin", None),
                route("small", Some(7)),
                route("gone", None),
            ],
            &sampled,
            limits,
        );
        let of = |name: &str, state| {
            counts
                .iter()
                .find(|c| c.route == name && c.state == state)
                .map(|c| c.records)
        };
        assert_eq!(of("big", RecordState::Completed), Some(5_000));
        assert_eq!(
            of("thin", RecordState::Completed),
            Some(1_001),
            "more than the limit was seen"
        );
        assert_eq!(
            of("gone", RecordState::Completed),
            Some(1_001),
            "not in the sample at all"
        );
        assert_eq!(of("small", RecordState::Completed), Some(7));
        assert_eq!(of("small", RecordState::InFlight), Some(2));
        assert_eq!(of("small", RecordState::OutcomeUnknown), None, "no zeros");
    }

    #[test]
    fn a_count_past_the_limit_is_left_to_the_estimate() {
        let limits = CountLimits::default();
        assert_eq!(RouteCount::completed_upto(100_000, limits), Some(100_000));
        assert_eq!(RouteCount::completed_upto(100_001, limits), None);
    }
}

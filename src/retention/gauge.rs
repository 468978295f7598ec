//! `idemgate_records{route,state}`: counted by the store (through its
//! indexes and a sample, see `store::count` and the backends' `count`) once
//! at start and then every `[store] sweep_interval`, beside the sweeper.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGaugeVec;
use tokio::task::JoinHandle;

use crate::store::{Count, RecordState, Store};

/// Every `interval` (and at once), sets each (route, state) series to the
/// store's count; a series the store no longer reports (its records all
/// swept or purged) is set to 0, and `routes` (the configured ones, read at
/// each refresh) always have all three states. A failed count leaves the
/// gauge as it was, and is logged.
pub fn spawn_record_counter(
    store: Arc<dyn Store>,
    interval: Duration,
    gauge: IntGaugeVec,
    routes: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut shown: HashSet<(String, RecordState)> = HashSet::new();
        // Counts start `interval` apart (a slow count does not push the next
        // one later), so the gauge is never older than one interval.
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match store.count().await {
                Ok(counts) => shown = publish(&gauge, &counts, &routes(), shown),
                Err(err) => {
                    tracing::warn!(error = %err, backend = store.backend(), "counting records failed")
                }
            }
        }
    })
}

/// Sets the gauge from `counts`; returns the series now shown.
fn publish(
    gauge: &IntGaugeVec,
    counts: &[Count],
    routes: &[String],
    before: HashSet<(String, RecordState)>,
) -> HashSet<(String, RecordState)> {
    let mut now = HashSet::new();
    for route in routes {
        for state in RecordState::ALL {
            now.insert((route.clone(), state));
        }
    }
    now.extend(before);
    for (route, state) in &now {
        let records = counts
            .iter()
            .filter(|c| &c.route == route && c.state == *state)
            .map(|c| c.records)
            .sum::<u64>();
        gauge
            .with_label_values(&[route.as_str(), state.as_str()])
            .set(i64::try_from(records).unwrap_or(i64::MAX));
    }
    for count in counts {
        if now.insert((count.route.clone(), count.state)) {
            gauge
                .with_label_values(&[count.route.as_str(), count.state.as_str()])
                .set(i64::try_from(count.records).unwrap_or(i64::MAX));
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    fn count(route: &str, state: RecordState, records: u64) -> Count {
        Count {
            route: route.into(),
            state,
            records,
        }
    }

    #[test]
    fn series_follow_the_counts_and_fall_to_zero_when_gone() {
        let gauge = IntGaugeVec::new(Opts::new("r", "r"), &["route", "state"]).unwrap();
        let get = |route: &str, state: RecordState| {
            gauge.with_label_values(&[route, state.as_str()]).get()
        };
        let routes = vec!["charges".to_string()];
        let shown = publish(
            &gauge,
            &[
                count("charges", RecordState::Completed, 7),
                count("old", RecordState::OutcomeUnknown, 2),
            ],
            &routes,
            HashSet::new(),
        );
        assert_eq!(get("charges", RecordState::Completed), 7);
        assert_eq!(get("charges", RecordState::InFlight), 0);
        assert_eq!(get("charges", RecordState::OutcomeUnknown), 0);
        assert_eq!(get("old", RecordState::OutcomeUnknown), 2);

        publish(
            &gauge,
            &[count("charges", RecordState::InFlight, 1)],
            &routes,
            shown,
        );
        assert_eq!(get("charges", RecordState::Completed), 0, "swept");
        assert_eq!(get("charges", RecordState::InFlight), 1);
        assert_eq!(get("old", RecordState::OutcomeUnknown), 0, "purged");
    }
}

//! What operators tune retention from: how old records are when retries
//! replay them (`idemgate_replay_age_seconds`, and a summary per route for
//! `GET /admin/routes`), and how many records each route holds per state
//! (`idemgate_records`). docs/tuning-retention.md walks through using them.

pub mod ages;
pub mod gauge;

pub use ages::{AgeQuantiles, AgeSummary, ReplayAges};
pub use gauge::spawn_record_counter;

/// `idemgate_replay_age_seconds` buckets, in seconds: 1 s to 30 days, dense
/// where retentions are usually set (minutes to a few days).
pub const REPLAY_AGE_BUCKETS: [f64; 21] = [
    1.0,
    5.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    21600.0,
    43200.0,
    86400.0,
    172_800.0,
    259_200.0,
    604_800.0,
    1_209_600.0,
    2_592_000.0,
];

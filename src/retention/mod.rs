//! How many records each route holds per state (`idemgate_records`), counted
//! from the store in the background. With the replay ages
//! (`src/metrics/replay_ages.rs`) it is what operators tune retention from;
//! docs/tuning-retention.md walks through using them.

pub mod gauge;

pub use gauge::spawn_record_counter;

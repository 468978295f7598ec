//! One keyed execution as the metrics see it: in `idemgate_inflight` while
//! it runs, in `idemgate_executions_total` once it ends, panics included.
//! Both move with the execution, not with its client: a request whose client
//! left is counted in neither `idemgate_requests_total` nor its histogram,
//! and an alert that saw only those would take its running execution for
//! one that hangs.

use prometheus::{IntCounter, IntGauge};

pub struct Executing {
    inflight: IntGauge,
    ended: IntCounter,
}

impl Executing {
    pub(super) fn new(inflight: IntGauge, ended: IntCounter) -> Self {
        inflight.inc();
        Self { inflight, ended }
    }
}

impl Drop for Executing {
    fn drop(&mut self) {
        // Counted ended before it leaves the gauge: a scrape in between sees
        // it in both, never in neither.
        self.ended.inc();
        self.inflight.dec();
    }
}

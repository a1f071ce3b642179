//! The `metrics` import: counters a guest adds to, which the subtask's task moves into the
//! job's metrics after each call ([`crate::operator::OperatorInstance::take_dropped_late`]).

use super::GuestState;
use crate::bindings::weir::operator::metrics as wit;

impl wit::Host for GuestState {
    fn count_dropped_late(&mut self, records: u32) {
        self.dropped_late += u64::from(records);
    }
}

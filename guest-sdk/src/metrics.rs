//! Counters the host keeps per operator and shows in the run summary, `/metrics` and the
//! console. The windows library counts its late drops here; an operator that drops records
//! for event time by its own logic can do the same.
//!
//! Off `wasm32` (native unit tests), counts go nowhere.

/// Counts `records` dropped as too late for event time.
pub fn count_dropped_late(records: u32) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::weir::operator::metrics::count_dropped_late(records);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = records;
}

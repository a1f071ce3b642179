//! The `bundle` import: the files `weir build` packed at the end of the component
//! (`host/src/engine/bundle.rs`), as the component was loaded.

use super::GuestState;
use crate::bindings::weir::operator::bundle as wit;

impl wit::Host for GuestState {
    fn files(&mut self) -> Vec<u8> {
        self.bundle.to_vec()
    }
}

//! The host side of the WIT world in `wit/`: the one `bindgen!` call.
//!
//! Imports (`state`, `log`) are implemented in [`crate::guest`]; the export (`processor`) is
//! called by [`crate::guest::WasmOperator`].

wasmtime::component::bindgen!({
    path: "../wit",
    world: "weir:operator/operator",
});

/// The WIT package this host implements, as components name it.
pub const PACKAGE: &str = "weir:operator@0.2.0";
/// The interface every operator component must export.
pub const PROCESSOR_EXPORT: &str = "weir:operator/processor@0.2.0";
/// The interfaces Weir provides to operators, besides WASI.
pub const WEIR_IMPORTS: [&str; 3] = [
    "weir:operator/types@0.2.0",
    "weir:operator/state@0.2.0",
    "weir:operator/log@0.2.0",
];

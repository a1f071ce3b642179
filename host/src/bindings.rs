//! The host side of the WIT world in `wit/`: the one `bindgen!` call.
//!
//! Imports (`state`, `time`, `log`, `metrics`, `bundle`) are implemented in [`crate::guest`];
//! the export (`processor`) is called by [`crate::guest::WasmOperator`].
//!
//! The host binds the world `bundled-operator`, which is `operator` plus the `bundle` import:
//! a component of either world links against it (a component imports only what it uses).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "weir:operator/bundled-operator",
});

/// The bindings of an operator instance, whichever of the two worlds its component targets.
pub type Operator = BundledOperator;
/// A component ready to instantiate as an [`Operator`].
pub type OperatorPre<T> = BundledOperatorPre<T>;

/// The WIT package this host implements, as components name it.
pub const PACKAGE: &str = "weir:operator@0.6.0";
/// The world every operator component implements.
pub const WORLD: &str = "weir:operator/operator@0.6.0";
/// The interface every operator component must export.
pub const PROCESSOR_EXPORT: &str = "weir:operator/processor@0.6.0";
/// The interfaces Weir provides to operators, besides WASI.
pub const WEIR_IMPORTS: [&str; 6] = [
    "weir:operator/types@0.6.0",
    "weir:operator/state@0.6.0",
    "weir:operator/time@0.6.0",
    "weir:operator/log@0.6.0",
    "weir:operator/metrics@0.6.0",
    "weir:operator/bundle@0.6.0",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The names above are what components built from `wit/` call these interfaces.
    #[test]
    fn names_carry_the_version_of_the_wit_package() {
        let wit = include_str!("../../wit/operator.wit");
        let (_, version) = PACKAGE.split_once('@').expect("a versioned package");
        assert!(wit.contains(&format!("package {PACKAGE};")), "{PACKAGE}");
        for name in [WORLD, PROCESSOR_EXPORT].into_iter().chain(WEIR_IMPORTS) {
            assert!(name.ends_with(&format!("@{version}")), "{name}");
        }
    }
}

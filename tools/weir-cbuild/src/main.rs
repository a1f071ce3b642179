//! `weir-cbuild`: the two steps of building a C operator that need the component tooling,
//! done with the library crates instead of the `wit-bindgen` and `wasm-tools` CLIs (which
//! take ~5.5 min to `cargo install`). The groundwork of `weir build` for C.
//!
//! ```sh
//! weir-cbuild bindgen WIT_DIR OUT_DIR [WORLD]   # operator.h, operator.c, operator_component_type.o
//! clang-16 --target=wasm32-wasi -mexec-model=reactor -O2 -IOUT_DIR -o op.core.wasm \
//!     op.c OUT_DIR/operator.c OUT_DIR/operator_component_type.o
//! weir-cbuild component op.core.wasm op.wasm     # + the WASI preview1 reactor adapter
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use wit_bindgen_core::wit_parser::Resolve;
use wit_component::ComponentEncoder;

const USAGE: &str = "usage:
  weir-cbuild bindgen WIT_DIR OUT_DIR [WORLD]   C bindings of WORLD (default: the package's only world)
  weir-cbuild component CORE_WASM OUT_WASM      a component of a wasm32-wasi core module";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["bindgen", wit, out] => bindgen(Path::new(wit), Path::new(out), None),
        ["bindgen", wit, out, world] => bindgen(Path::new(wit), Path::new(out), Some(world)),
        ["component", core, out] => component(Path::new(core), Path::new(out)),
        _ => bail!("{USAGE}"),
    }
}

/// What `wit-bindgen c WIT_DIR --world WORLD --out-dir OUT_DIR` does.
fn bindgen(wit: &Path, out: &Path, world: Option<&str>) -> Result<()> {
    let mut resolve = Resolve::default();
    let (package, _sources) = resolve
        .push_path(wit)
        .with_context(|| format!("reading WIT from {}", wit.display()))?;
    let world = resolve.select_world(&[package], world)?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in files.iter() {
        let path: PathBuf = out.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What `wasm-tools component new CORE --adapt wasi_snapshot_preview1=REACTOR -o OUT` does.
fn component(core: &Path, out: &Path) -> Result<()> {
    use wasi_preview1_component_adapter_provider::{
        WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
    };
    let module = std::fs::read(core).with_context(|| format!("reading {}", core.display()))?;
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)?
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .with_context(|| format!("encoding {} as a component", core.display()))?;
    std::fs::write(out, component).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

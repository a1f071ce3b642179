//! The WebAssembly engine, set up once per process.
//!
//! - [`Engine`]: wasmtime configured for components with epoch interruption, the [`Linker`]
//!   with WASI and Weir's imports, the component cache and the epoch ticker.
//! - [`cache`]: the on-disk cache of precompiled components.
//! - [`bundle`]: files packed at the end of a component (a Python project's modules), which
//!   its `bundle` import reads and its compiled artifact does not depend on.
//! - [`function_cache`]: Cranelift's incremental compilation cache, on disk, for `weir build`.
//! - [`component`]: loading a component and checking that it implements Weir's world.
//! - [`component_digest`]: a component file's sha256, which checkpoints record.
//!
//! The engine and [`crate::guest`] import each other, on purpose: the engine links the
//! guest's host functions into every component and makes stores of [`GuestState`], and a
//! guest instantiates its component through the engine. They stay two modules because
//! `weir build` and the CLI use the engine (compile, cache, check) without any instance.

pub(crate) mod bundle;
pub(crate) mod cache;
pub(crate) mod component;
pub(crate) mod component_digest;
pub(crate) mod function_cache;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};

pub use cache::ComponentCache;
pub use component::{LoadError, OperatorComponent};
pub use function_cache::FunctionCache;

use crate::bindings::Operator;
use crate::guest::GuestState;

/// How often the engine's epoch advances: the granularity of the CPU-time limit.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Options for [`Engine::new`].
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// Where precompiled components are cached; `None` disables the cache.
    pub cache: Option<ComponentCache>,
}

/// wasmtime's engine and linker for Weir operators, shared by every subtask of every job.
#[derive(Clone)]
pub struct Engine {
    engine: wasmtime::Engine,
    linker: Arc<Linker<GuestState>>,
    cache: Option<ComponentCache>,
    /// Keeps the epoch ticker running while any clone of this engine lives.
    _ticker: Arc<EpochTicker>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub fn new(options: EngineOptions) -> anyhow::Result<Self> {
        Self::with_config(options, None)
    }

    /// An engine that compiles through `functions` (Cranelift's incremental cache): for
    /// `weir build`, which compiles a changed component whose functions mostly did not
    /// change. It makes the same artifacts as [`Engine::new`]'s, under the same cache keys.
    pub fn for_builds(
        options: EngineOptions,
        functions: Arc<FunctionCache>,
    ) -> anyhow::Result<Self> {
        Self::with_config(options, Some(functions))
    }

    fn with_config(
        options: EngineOptions,
        functions: Option<Arc<FunctionCache>>,
    ) -> anyhow::Result<Self> {
        let mut config = wasmtime::Config::new();
        config
            .wasm_component_model(true)
            // Bounds guest CPU time: a store traps once its deadline (in ticks) passes.
            .epoch_interruption(true)
            .cranelift_opt_level(wasmtime::OptLevel::Speed)
            .parallel_compilation(true);
        if let Some(functions) = functions {
            config.enable_incremental_compilation(functions)?;
        }
        let engine = wasmtime::Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        Operator::add_to_linker::<_, HasSelf<GuestState>>(&mut linker, |s| s)?;
        let ticker = EpochTicker::start(engine.clone());
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            cache: options.cache,
            _ticker: Arc::new(ticker),
        })
    }

    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.engine
    }

    pub fn linker(&self) -> &Linker<GuestState> {
        &self.linker
    }

    pub fn cache(&self) -> Option<&ComponentCache> {
        self.cache.as_ref()
    }

    /// Loads, checks and prepares a component for instantiation.
    pub fn load(&self, path: &std::path::Path) -> Result<OperatorComponent, LoadError> {
        component::load(self, path)
    }
}

/// A thread that advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct EpochTicker {
    /// Raised when the ticker is dropped: its thread ends.
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: wasmtime::Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            // Without the ticker no CPU limit could fire; failing to spawn one thread at
            // start-up means the process is out of resources anyway.
            .map(drop)
            .unwrap_or_else(|e| tracing::error!("cannot start the epoch ticker: {e}"));
        Self { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

//! The `weir` command line.
//!
//! Output meant for the user goes to standard output (`validate`) or standard error (the run
//! summary, since a job may write its records to standard output). Exit codes: 0 success,
//! 1 the job, build or check failed, 2 the input (job file, component, project, arguments) is
//! unusable or a build tool is missing.

#[macro_use]
mod output;

mod build;
pub mod checkpoints;
mod client;
mod new;
mod plan;
mod run;
mod savepoint;
mod serve;
mod state;
mod store_arg;
mod toolchain;
mod upgrade;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

/// Weir runs stateful stream operators compiled to WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Say more: `-v` what the host does (checkpoints, restores, cleanup), `-vv` its details.
    /// `RUST_LOG` overrides both.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Say less: errors only (and `weir run` prints no summary).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

impl Cli {
    /// What goes to standard error when `RUST_LOG` does not say: warnings and errors, and the
    /// guests' own lines (their `print`, `logging`, `console`), which are the user's; a
    /// long-running host (`serve`) also says what it does.
    fn log_filter(&self) -> &'static str {
        let serving = matches!(self.command, Command::Serve(_));
        match (self.quiet, self.verbose, serving) {
            (true, _, _) => "error",
            (false, 0, false) => "warn,weir::guest=info",
            (false, 0, true) | (false, 1, _) => "warn,weir=info",
            (false, _, _) => "warn,weir=debug",
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a job file to the end of its input.
    Run(run::RunArgs),
    /// Check that a component implements Weir's operator world, or that a job file is valid
    /// and its operators' components implement it (then print its stages, as `plan` does).
    Validate {
        /// The component (.wasm) or job file (.toml) to check.
        path: PathBuf,
    },
    /// Print a job's stages: where a Kafka job re-keys, and the topics between its stages.
    Plan {
        /// The job file.
        job: PathBuf,
    },
    /// Compile an operator project (Rust, Python, JavaScript, C) into a component and check
    /// it against Weir's world.
    Build(build::BuildArgs),
    /// Create an operator project: a small working operator and a job that runs it.
    New(new::NewArgs),
    /// Install the toolchains that build Python, JavaScript, C and Rust operators, or list them.
    Toolchain(toolchain::ToolchainArgs),
    /// Inspect the completed checkpoints in an object store.
    Checkpoints(checkpoints::CheckpointsArgs),
    /// Copy a job's checkpoint out of its chain under a name (a savepoint, which only
    /// `weir checkpoints delete-savepoint` removes), to restore later with
    /// `--restore savepoint:NAME`.
    Savepoint(savepoint::SavepointArgs),
    /// Print the keyed state of an operator at a completed checkpoint, without running the job.
    State(state::StateArgs),
    /// Run a host that runs jobs submitted over HTTP, with a web console at its address.
    ///
    /// Open http://ADDRESS/ in a browser and sign in with the token to watch its jobs: their
    /// graphs with rates and backpressure, checkpoints and logs.
    Serve(serve::ServeArgs),
    /// Swap a served job's code for a new version and keep its state: a savepoint, the
    /// new version restored from it, and the old one back if the new one fails before its
    /// first checkpoint.
    Upgrade(upgrade::UpgradeArgs),
    #[command(flatten)]
    Client(client::ClientCommand),
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// The input is unusable (exit code 2).
    pub fn input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }

    /// The job or check failed (exit code 1).
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }
}

/// Entry point of the `weir` binary.
pub fn main() -> ExitCode {
    crate::disable_huge_pages();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.log_filter())),
        )
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(args, cli.quiet),
        Command::Validate { path } => validate::validate(&path),
        Command::Plan { job } => plan::plan(&job),
        Command::Build(args) => build::build(args),
        Command::New(args) => new::new(args),
        Command::Toolchain(args) => toolchain::toolchain(args),
        Command::Checkpoints(args) => checkpoints::checkpoints(args),
        Command::Savepoint(args) => savepoint::savepoint(args),
        Command::State(args) => state::state(args),
        Command::Serve(args) => serve::serve(args),
        Command::Upgrade(args) => upgrade::upgrade(args),
        Command::Client(command) => client::client(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", report(&failure.error));
            ExitCode::from(failure.code)
        }
    }
}

/// An error and its causes on one line, `outer: inner: ...`, leaving out a cause whose text
/// is already there: many errors name their source in their own message and also return it
/// as their `source()`, which would print it twice.
///
/// A failure in the guest's own words (a traceback, a stack, a panic message) comes first
/// instead, as the guest's language shows it, with the operator and subtask after it and the
/// rest of the chain (`job `x` failed`) on the last line.
fn report(error: &anyhow::Error) -> String {
    let guests = error
        .chain()
        .find_map(operator_failure)
        .filter(|failure| failure.kind.is_guests_message())
        .map(ToString::to_string);
    // The outermost error that shows the guest's failure (it may add to it: the restarts).
    let mut first: Option<String> = None;
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) || first.as_ref().is_some_and(|f| f.contains(&text)) {
            continue;
        }
        if guests.as_ref().is_some_and(|g| text.contains(g.as_str())) {
            first.get_or_insert(text);
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    match first {
        Some(first) if line.is_empty() => first,
        Some(first) => format!("{first}\n{line}"),
        None => line,
    }
}

/// The operator failure `error` is or wraps, if any.
fn operator_failure<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a crate::operator::OperatorError> {
    use crate::job::{JobError, SupervisorError};
    fn job(e: &JobError) -> Option<&crate::operator::OperatorError> {
        match e {
            JobError::Operator(failure) => Some(failure),
            _ => None,
        }
    }
    if let Some(failure) = error.downcast_ref::<crate::operator::OperatorError>() {
        return Some(failure);
    }
    if let Some(e) = error.downcast_ref::<JobError>() {
        return job(e);
    }
    match error.downcast_ref::<SupervisorError>() {
        Some(SupervisorError::Failed { error, .. }) => job(error),
        _ => None,
    }
}

/// The engine used by the CLI: with the default on-disk component cache.
fn engine() -> Result<crate::engine::Engine, Failure> {
    crate::engine::Engine::new(crate::engine::EngineOptions {
        cache: crate::engine::ComponentCache::default_location(),
    })
    .map_err(Failure::failed)
}

/// The engine of `weir build`: [`engine`]'s, compiling through the function cache `name`
/// beside the component cache (none without one), which it returns to be saved.
fn build_engine(
    name: &str,
) -> Result<
    (
        crate::engine::Engine,
        Option<Arc<crate::engine::FunctionCache>>,
    ),
    Failure,
> {
    let cache = crate::engine::ComponentCache::default_location();
    let Some(dir) = cache.as_ref().map(|c| c.dir().to_owned()) else {
        return Ok((engine()?, None));
    };
    let functions = Arc::new(crate::engine::FunctionCache::open(&dir, name));
    let engine = crate::engine::Engine::for_builds(
        crate::engine::EngineOptions { cache },
        functions.clone(),
    )
    .map_err(Failure::failed)?;
    Ok((engine, Some(functions)))
}

/// The tokio runtime of a command: several workers for commands that run jobs, one thread
/// for those that only talk to a store or a host.
fn runtime(jobs: bool) -> Result<tokio::runtime::Runtime, Failure> {
    let mut builder = if jobs {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.thread_name("weir-worker");
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().map_err(|e| {
        Failure::failed(anyhow::Error::new(e).context("cannot start the tokio runtime"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let spec = crate::job::SpecError::Read {
            path: "nope.toml".into(),
            source: io,
        };
        let error = anyhow::Error::new(spec).context("job `x` failed");
        assert_eq!(
            report(&error),
            "job `x` failed: cannot read job file nope.toml: No such file or directory"
        );
        let chained = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(report(&chained), "outer: middle: inner");
    }

    #[test]
    fn a_guests_own_message_comes_first_and_the_job_last() {
        let failure = |kind| crate::operator::OperatorError {
            operator: crate::ids::OperatorName("count".into()),
            subtask: crate::ids::SubtaskIndex(0),
            kind,
            message: "ValueError: boom\nTraceback (most recent call last):".into(),
            record: None,
            on: None,
        };
        let error = anyhow::Error::new(crate::job::JobError::from(failure(
            crate::operator::FailureKind::Returned,
        )))
        .context("job `x` failed");
        assert_eq!(
            report(&error),
            "ValueError: boom\nTraceback (most recent call last):\n\
             in operator `count` subtask 0, which returned an error\njob `x` failed"
        );
        let limit = anyhow::Error::new(failure(crate::operator::FailureKind::CpuLimit))
            .context("job `x` failed");
        assert!(
            report(&limit).starts_with("job `x` failed: operator `count` subtask 0 exceeded"),
            "{}",
            report(&limit)
        );
    }
}

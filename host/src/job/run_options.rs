//! What a run is given besides its pipeline: [`RunOptions`] (the channels, the progress line,
//! the stop and checkpoint requests of a running job, the counters to update) and
//! [`Checkpointing`], how the pipeline checkpoints.
//!
//! The caller builds them before the run. Some are handles it keeps a clone of, to act on
//! the job while it runs: `weir serve` stops a job, asks it for a checkpoint and reads its
//! counters through them (`serve::registry`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::in_flight;
use super::metrics::JobMetrics;
use crate::checkpoint::{ChainPolicy, CheckpointStore};
use crate::operator::GuestLogFile;

/// Options for [`run`](super::run).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Show a progress line on a terminal.
    pub progress: bool,
    /// Batches that may wait in each channel, at most.
    pub channel_capacity: usize,
    /// How the records waiting in each channel are bounded besides.
    pub in_flight: InFlight,
    /// Stops the job where it is (no last checkpoint) when raised.
    pub stop: StopSignal,
    /// Asks for a checkpoint now (`weir checkpoint ID`), besides the periodic ones.
    pub checkpoint_now: CheckpointRequest,
    /// Counters to update, for a caller that watches the job while it runs (`weir serve`);
    /// they must be made for the pipeline's operators. A run makes its own otherwise.
    pub metrics: Option<Arc<JobMetrics>>,
    /// Where to keep the guests' log lines besides the host's log (`weir serve` keeps them
    /// in the job's folder, for `weir job ID --logs`).
    pub guest_log: Option<Arc<GuestLogFile>>,
    /// How long to wait for a lease another run holds on the job's folder or an output
    /// (`crate::checkpoint::lease`) before giving up; zero refuses at once. A Kafka
    /// partition's pipeline waits for the process that had the partition to let go of it.
    pub lease_wait: Duration,
    /// Raised once every subtask of a run has opened its operator and restored its state: the
    /// job has started (`weir submit` waits for it, to say whether it did).
    pub started: StartedSignal,
    /// Operators (by uid) whose state a restore may drop because the job no longer has them
    /// (`--allow-dropped-state`); a restore that would drop any other's is refused.
    pub allow_dropped_state: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            progress: false,
            channel_capacity: 8,
            in_flight: InFlight::default(),
            stop: StopSignal::default(),
            checkpoint_now: CheckpointRequest::default(),
            metrics: None,
            guest_log: None,
            lease_wait: Duration::ZERO,
            started: StartedSignal::default(),
            allow_dropped_state: Vec::new(),
        }
    }
}

/// How many records may wait in front of each consumer (`job::in_flight`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InFlight {
    /// What the consumer processes in its share of the checkpoint interval
    /// ([`in_flight::target`]); in a job without checkpoints, `channel_capacity` batches.
    #[default]
    CheckpointInterval,
    /// `channel_capacity` full batches, whatever the consumer's pace (as before in-flight
    /// data was bounded by time; for comparison).
    Batches,
}

impl InFlight {
    /// The target time of every consumer of a pipeline of `operators` operators.
    pub(super) fn target(
        self,
        checkpointing: Option<&Checkpointing>,
        operators: usize,
    ) -> Option<Duration> {
        match self {
            InFlight::CheckpointInterval => {
                checkpointing.map(|c| in_flight::target(c.interval, operators))
            }
            InFlight::Batches => None,
        }
    }
}

/// Asks a running job for a checkpoint as soon as none is in flight.
#[derive(Clone, Debug, Default)]
pub struct CheckpointRequest(pub(super) Arc<tokio::sync::Notify>);

impl CheckpointRequest {
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Waits for the next request (or the one made since the last wait).
    pub async fn requested(&self) {
        self.0.notified().await;
    }
}

/// Asks a running job to stop: its source reads no more and the job ends with
/// [`JobError::Stopped`](super::JobError::Stopped), as if it had crashed, so it resumes
/// from its latest checkpoint.
#[derive(Clone, Debug, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Raised by a run once it has started (see [`RunOptions::started`]); the caller keeps a
/// clone to read it.
#[derive(Clone, Debug, Default)]
pub struct StartedSignal(Arc<AtomicBool>);

impl StartedSignal {
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Lowers it again, for another run of the job.
    pub fn lower(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// How a pipeline checkpoints.
#[derive(Clone, Debug)]
pub struct Checkpointing {
    pub store: CheckpointStore,
    pub interval: Duration,
    /// How long a checkpoint may take before it fails.
    pub timeout: Duration,
    /// Checkpoints that may fail in a row before the job fails.
    pub tolerable_failures: u32,
    pub retain: usize,
    pub chains: ChainPolicy,
}

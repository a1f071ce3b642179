//! Kafka in and out, and scale-out across processes on Kafka's consumer groups.
//!
//! - [`settings`]: the `[source]` and `[sink]` sections of kind `kafka`, and client settings.
//! - [`source`]: [`PartitionSource`], one partition of the input topic as a job's source.
//! - [`sink`]: [`KafkaSink`], output published exactly once (staged per checkpoint, without
//!   broker transactions) or at least once.
//! - [`group`]: [`run_group`], a job run as a member of its consumer group: a pipeline per
//!   partition the group assigns to this process.
//!
//! # Scale-out: a pipeline per input partition
//!
//! Kafka decides which process owns which partition; Weir has no membership code of its own.
//! Each process joins the job's consumer group and, for every partition assigned to it, runs
//! the whole job as a pipeline of its own, reading only that partition, as Kafka Streams runs
//! a task per partition. The pipeline's keyed state, checkpoints, staged output and cleanup
//! live under `<job>/partitions/<p>/` in the shared object store, so a partition's state moves
//! with the partition: the new owner restores that folder's latest checkpoint. At any time one
//! process owns a partition, so every artifact still has exactly one deleter, cleanup runs
//! where the partition runs, and orphan sweeps work per partition as for any job.
//!
//! The price is Kafka Streams' rule: keyed state is per input partition, so records of one key
//! must arrive on one partition (produce with the key you group by). A job whose keys are
//! spread over partitions counts them per partition.
//!
//! On revocation a process stops the partition's pipeline before it acknowledges the
//! rebalance, so the next owner never overlaps with it. A process killed outright loses its
//! partitions when its group session times out (`session.timeout.ms`, which the job file can
//! set in `[source.properties]`); the new owners replay from the last completed checkpoint.

pub mod group;
pub mod settings;
pub mod sink;
pub mod source;

pub use group::{GroupView, OwnedPartition, run_group, run_group_watched};
pub use sink::KafkaSink;
pub use source::PartitionSource;

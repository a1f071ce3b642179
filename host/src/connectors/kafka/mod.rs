//! Kafka in and out: a topic partition as a source, a topic as a sink. Running a job over
//! every partition of its topic, across processes, is [`crate::group`]'s.
//!
//! - [`settings`]: the `[source]` and `[sink]` sections of kind `kafka`, and client settings.
//! - [`source`]: [`PartitionSource`], one partition of the input topic as a job's source.
//! - [`sink`]: [`KafkaSink`], output published exactly once (staged per checkpoint, without
//!   broker transactions) or at least once.
//! - [`markers`]: what the pipelines of one stage of a job tell the next through a
//!   repartition topic besides records: event time and the end of their input.

pub(crate) mod markers;
pub mod settings;
pub(crate) mod sink;
pub(crate) mod source;

pub use sink::KafkaSink;
pub use source::PartitionSource;

//! The keyed-count pipeline the throughput benchmarks share: generator (records over keys)
//! -> key-by -> one counter subtask -> discard, run in this process.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use weir_host::checkpoint::JobStart;
use weir_host::connectors::{DiscardSink, GeneratorSource};
use weir_host::job::spec::RecordPolicy;
use weir_host::job::watermarks::WatermarkPolicy;
use weir_host::job::{KeyBy, Pipeline, RunOptions, Stage, run};
use weir_host::operator::{GuestLimits, OperatorFactory};
use weir_host::partition::KeyGroups;

pub fn pipeline(factory: Arc<dyn OperatorFactory>, records: u64, keys: u64) -> Pipeline {
    one_stage(
        "keyed-count",
        GeneratorSource::new(records, keys),
        factory,
        "{}",
        None,
    )
}

/// `source` -> key-by -> one subtask of `factory` (with `config_json`) -> discard.
pub fn one_stage(
    name: &str,
    source: GeneratorSource,
    factory: Arc<dyn OperatorFactory>,
    config_json: &str,
    watermarks: Option<WatermarkPolicy>,
) -> Pipeline {
    Pipeline {
        name: name.into(),
        key_groups: KeyGroups::default(),
        batch_size: 1024,
        source: Box::new(source),
        stages: vec![Stage {
            name: name.into(),
            uid: name.into(),
            component: None,
            factory,
            parallelism: 1,
            key_by: Some(KeyBy::RecordKey),
            config_json: config_json.into(),
            limits: GuestLimits {
                memory_bytes: 2 << 30,
                ..GuestLimits::default()
            },
            on_error: RecordPolicy::Fail,
            on_bad_record: RecordPolicy::Fail,
        }],
        source_on_bad_record: RecordPolicy::Fail,
        sink: Box::new(DiscardSink),
        dead_letters: Vec::new(),
        checkpointing: None,
        watermarks,
        leases: Vec::new(),
    }
}

/// Records per second of one run of the pipeline over `factory`.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    factory: Arc<dyn OperatorFactory>,
    records: u64,
    keys: u64,
) -> f64 {
    measure_with(runtime, factory, records, keys, "{}", records)
}

/// Records per second of one run of the pipeline over `factory` configured with
/// `config_json`, which must bring `sink_records` records to the sink.
pub fn measure_with(
    runtime: &tokio::runtime::Runtime,
    factory: Arc<dyn OperatorFactory>,
    records: u64,
    keys: u64,
    config_json: &str,
    sink_records: u64,
) -> f64 {
    let pipeline = one_stage(
        "keyed-count",
        GeneratorSource::new(records, keys),
        factory,
        config_json,
        None,
    );
    let started = Instant::now();
    let summary = runtime
        .block_on(run(pipeline, JobStart::fresh(), RunOptions::default()))
        .unwrap_or_else(|e| panic!("benchmark job failed: {e}"));
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(
        summary.sink_records, sink_records,
        "the records the operator emits reached the sink"
    );
    records as f64 / secs
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

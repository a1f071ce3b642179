//! [`JobGraph`]: a job's operator graph as the console draws it
//! (`GET /v1/jobs/{id}/graph`): the source, each operator and the sink in order, each with
//! its counts, rates, state, watermark and backpressure, and the same per subtask. A Kafka
//! job that re-keys has a node for each repartition topic too, between the stage that writes
//! it and the one that reads it, with what was written, read and is still unread (its lag).
//!
//! Backpressure is the share of time a task spent blocked on sending downstream
//! ([`super::rates`]), graded as Flink grades it: OK up to 10 %, LOW up to 50 %, HIGH above.
//! A task that is HIGH is held back by a slower one after it: the first node after a run of
//! HIGH ones is the bottleneck.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::protocol::JobStatus;
use super::rates::{Part, PipelineView, RateHistory, TaskRate};
use crate::job::spec::{KeyBy, SinkSpec, SourceSpec};
use crate::job::watermarks::END_OF_TIME;
use crate::job::{JobMetrics, JobSpec};

/// `GET /v1/jobs/{id}/graph`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobGraph {
    pub job: String,
    pub name: String,
    pub status: JobStatus,
    /// When the rates were taken (Unix time); `None` before the second sample.
    pub sampled_at_ms: Option<u64>,
    /// Source, operators, sink, in the order records pass them.
    pub nodes: Vec<GraphNode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Source,
    Operator,
    /// A repartition topic between two stages of a Kafka job.
    Topic,
    Sink,
}

/// One node: the sums (rates, state), least watermark and worst backpressure of its subtasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphNode {
    pub kind: NodeKind,
    pub name: String,
    /// What it is: the source's input, an operator's keying, the sink's output.
    pub detail: String,
    pub parallelism: u32,
    #[serde(flatten)]
    pub figures: Figures,
    /// How far the watermark is behind the host's clock, while the job runs.
    pub watermark_lag_ms: Option<i64>,
    pub timers_pending: Option<u64>,
    /// Records the operator dropped as too late for event time (operators only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_late: Option<u64>,
    /// Messages of the Kafka partitions it reads (a source's, a topic's) owned here that are
    /// not read yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    pub subtasks: Vec<GraphSubtask>,
}

/// One subtask of a node (of a Kafka job: per owned partition).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphSubtask {
    pub subtask: u32,
    pub partition: Option<i32>,
    #[serde(flatten)]
    pub figures: Figures,
    /// Messages of its Kafka partition not read yet (a source's or a topic's partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
}

/// What a node and each of its subtasks show.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub records_in: u64,
    pub records_out: u64,
    pub in_per_second: Option<f64>,
    pub out_per_second: Option<f64>,
    /// Keyed state held, as of the last snapshot (operators only).
    pub state_bytes: Option<u64>,
    /// The least watermark; `None` before the first, and once event time ended.
    pub watermark_ms: Option<i64>,
    /// Every input ended, and with it event time: the watermark passed every timestamp.
    #[serde(default)]
    pub event_time_ended: bool,
    pub backpressure: Option<Backpressure>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Backpressure {
    /// The share of the last second blocked on sending downstream, 0 to 1.
    pub ratio: f64,
    pub level: BackpressureLevel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackpressureLevel {
    Ok,
    Low,
    High,
}

impl Backpressure {
    pub fn of(ratio: f64) -> Self {
        let level = if ratio <= 0.1 {
            BackpressureLevel::Ok
        } else if ratio <= 0.5 {
            BackpressureLevel::Low
        } else {
            BackpressureLevel::High
        };
        Self { ratio, level }
    }
}

/// What each node of `spec` is, source to sink.
pub(crate) fn describe(spec: &JobSpec) -> Vec<String> {
    let mut nodes = vec![match &spec.source {
        SourceSpec::TextLines { path, .. } => format!("text lines of {}", path.display()),
        SourceSpec::JsonLines { path, .. } => format!("JSON lines of {}", path.display()),
        SourceSpec::Kafka(k) => format!("Kafka topic {} (group {})", k.topic, k.group_id),
        SourceSpec::Generator { records, keys, .. } => {
            format!("generator: {records} records over {keys} keys")
        }
    }];
    // A Kafka job that re-keys reaches an operator through the topic between two stages.
    let plan = crate::job::stages::StagePlan::of(spec);
    nodes.extend(spec.operators.iter().map(|o| {
        let keyed = match &o.key_by {
            Some(KeyBy::RecordKey) => "keyed by the record key".to_owned(),
            Some(KeyBy::JsonPointer(pointer)) => format!("keyed by {pointer}"),
            None => "not keyed".to_owned(),
        };
        match plan.topics().find(|t| t.operator == o.name) {
            Some(t) => format!("{keyed}, through topic {}", t.topic),
            None => keyed,
        }
    }));
    nodes.push(match &spec.sink {
        SinkSpec::Stdout => "standard output".to_owned(),
        SinkSpec::File { path } => format!("file {}", path.display()),
        SinkSpec::Discard => "discarded".to_owned(),
        SinkSpec::Kafka(k) => format!("Kafka topic {}", k.topic),
    });
    nodes
}

/// A repartition topic as a node of the graph: the input of stage `stage`, whose first
/// operator is the job's `first_operator`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicNode {
    pub stage: usize,
    pub first_operator: usize,
    pub topic: String,
}

/// The repartition topics of `spec`, in order (none unless it reads Kafka and re-keys).
pub(crate) fn topic_nodes(spec: &JobSpec) -> Vec<TopicNode> {
    let plan = crate::job::stages::StagePlan::of(spec);
    plan.stages
        .iter()
        .enumerate()
        .filter_map(|(stage, s)| match &s.input {
            crate::job::stages::StageInput::Repartition(t) => Some(TopicNode {
                stage,
                first_operator: s.operators.start,
                topic: t.topic.clone(),
            }),
            crate::job::stages::StageInput::Source => None,
        })
        .collect()
}

/// What a [`JobGraph`] is made from.
pub(crate) struct GraphInputs<'a> {
    pub job: &'a str,
    pub name: &'a str,
    pub status: JobStatus,
    /// From [`describe`].
    pub details: &'a [String],
    /// From [`topic_nodes`].
    pub topics: &'a [TopicNode],
    pub pipelines: &'a [PipelineView],
    pub rates: &'a RateHistory,
    /// The host's clock, Unix time in milliseconds.
    pub now_ms: i64,
}

/// One subtask's figures, before they are summed into its node.
struct Task {
    partition: Option<i32>,
    subtask: u32,
    records: (u64, u64),
    rate: Option<TaskRate>,
    state_bytes: Option<u64>,
    watermark_ms: Option<i64>,
    timers_pending: Option<u64>,
    dropped_late: Option<u64>,
    /// The sink sends nowhere: it has no backpressure of its own.
    sends: bool,
}

pub(crate) fn graph(inputs: &GraphInputs<'_>) -> JobGraph {
    let last = inputs.details.len().saturating_sub(1);
    let mut nodes: Vec<GraphNode> = inputs
        .details
        .iter()
        .enumerate()
        .map(|(node, detail)| {
            let kind = match node {
                0 => NodeKind::Source,
                n if n == last => NodeKind::Sink,
                _ => NodeKind::Operator,
            };
            // Rates and backpressure only while it runs: an ended job's last ones would read
            // as current.
            let rates = (inputs.status == JobStatus::Running).then_some(inputs.rates);
            let tasks: Vec<Task> = inputs
                .pipelines
                .iter()
                .flat_map(|p| tasks(p, p.part(node, last + 1), node, rates))
                .collect();
            // From the rates' names, which a Kafka job owning no partition has too.
            let name = inputs.rates.nodes().get(node).cloned().unwrap_or_default();
            let mut node = node_of(kind, name, detail.clone(), &tasks, inputs);
            if kind == NodeKind::Source {
                add_lag(&mut node, inputs.pipelines, 0);
            }
            node
        })
        .collect();
    // From the last, so that each topic's place (its reader's node) is still as counted.
    for topic in inputs.topics.iter().rev() {
        let at = (topic.first_operator + 1).min(nodes.len());
        nodes.insert(at, topic_node(topic, inputs.pipelines));
    }
    JobGraph {
        job: inputs.job.to_owned(),
        name: inputs.name.to_owned(),
        status: inputs.status,
        sampled_at_ms: inputs.rates.latest_at_ms(),
        nodes,
    }
}

/// The stage a pipeline runs: 0 for a job of one stage.
fn stage_of(pipeline: &PipelineView) -> usize {
    pipeline.stage.as_ref().map_or(0, |s| s.index)
}

/// Gives `node` (the reader of stage `stage`'s input) the lag of each Kafka partition it reads
/// here, and their sum; a job whose pipelines know no lag (not Kafka) is left as it is.
fn add_lag(node: &mut GraphNode, pipelines: &[PipelineView], stage: usize) {
    let lags: BTreeMap<i32, i64> = pipelines
        .iter()
        .filter(|p| stage_of(p) == stage)
        .filter_map(|p| Some((p.partition?, p.lag?)))
        .collect();
    if lags.is_empty() {
        return;
    }
    node.lag = Some(lags.values().sum());
    for subtask in &mut node.subtasks {
        subtask.lag = subtask.partition.and_then(|p| lags.get(&p).copied());
    }
}

/// A repartition topic's node: the records its writers here wrote into it, those its readers
/// here read from it, one row per partition read here, and the lag of those.
fn topic_node(topic: &TopicNode, pipelines: &[PipelineView]) -> GraphNode {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let written: u64 = pipelines
        .iter()
        .filter(|p| stage_of(p) + 1 == topic.stage)
        .map(|p| load(&p.metrics.sink_records))
        .sum();
    let readers: Vec<&PipelineView> = pipelines
        .iter()
        .filter(|p| stage_of(p) == topic.stage)
        .collect();
    let read = |p: &PipelineView| load(&p.metrics.source_records);
    let figures = |records_in, records_out| Figures {
        records_in,
        records_out,
        in_per_second: None,
        out_per_second: None,
        state_bytes: None,
        watermark_ms: None,
        event_time_ended: false,
        backpressure: None,
    };
    let mut node = GraphNode {
        kind: NodeKind::Topic,
        name: topic.topic.clone(),
        detail: format!("repartition topic, read by stage {}", topic.stage),
        parallelism: readers.len() as u32,
        figures: figures(written, readers.iter().map(|p| read(p)).sum()),
        watermark_lag_ms: None,
        timers_pending: None,
        dropped_late: None,
        lag: None,
        subtasks: readers
            .iter()
            .map(|p| GraphSubtask {
                subtask: 0,
                partition: p.partition,
                // A partition's writers are every pipeline of the stage before: what it was
                // given is known only as what was read from it.
                figures: figures(read(p), read(p)),
                lag: None,
            })
            .collect(),
    };
    add_lag(&mut node, pipelines, topic.stage);
    node
}

/// Node `node`'s tasks in one pipeline, which it is `part` of.
fn tasks(
    pipeline: &PipelineView,
    part: Option<Part>,
    node: usize,
    rates: Option<&RateHistory>,
) -> Vec<Task> {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let metrics: &JobMetrics = &pipeline.metrics;
    let partition = pipeline.partition;
    let one = |records: u64, sends: bool| Task {
        partition,
        subtask: 0,
        records: (records, records),
        rate: rates.and_then(|r| r.task((partition, node, 0))),
        state_bytes: None,
        watermark_ms: None,
        timers_pending: None,
        dropped_late: None,
        sends,
    };
    match part {
        None => Vec::new(),
        Some(Part::Source) => vec![Task {
            watermark_ms: metrics.source_watermark(),
            ..one(load(&metrics.source_records), true)
        }],
        Some(Part::Sink) => vec![one(load(&metrics.sink_records), false)],
        Some(Part::Operator(operator)) => metrics.operators[operator]
            .subtasks
            .iter()
            .enumerate()
            .map(|(s, m)| Task {
                partition,
                subtask: s as u32,
                records: (load(&m.records_in), load(&m.records_out)),
                rate: rates.and_then(|r| r.task((partition, node, s as u32))),
                state_bytes: Some(load(&m.snapshots.state_bytes)),
                watermark_ms: m.watermark(),
                timers_pending: Some(load(&m.timers_pending)),
                dropped_late: Some(load(&m.dropped_late)),
                sends: true,
            })
            .collect(),
    }
}

fn node_of(
    kind: NodeKind,
    name: String,
    detail: String,
    tasks: &[Task],
    inputs: &GraphInputs<'_>,
) -> GraphNode {
    let rated: Vec<TaskRate> = tasks.iter().filter_map(|t| t.rate).collect();
    // A node's rate is known when every task's is.
    let all_rated = !tasks.is_empty() && rated.len() == tasks.len();
    let sum_rates = |f: fn(&TaskRate) -> f64| all_rated.then(|| rated.iter().map(f).sum());
    let sum = |f: fn(&Task) -> Option<u64>| tasks.iter().filter_map(f).reduce(|a, b| a + b);
    let watermark_ms = tasks.iter().filter_map(|t| t.watermark_ms).min();
    let backpressure = |t: &Task| t.sends.then_some(t.rate).flatten().map(|r| r.backpressure);
    GraphNode {
        kind,
        name,
        detail,
        parallelism: tasks.len() as u32,
        figures: Figures {
            records_in: tasks.iter().map(|t| t.records.0).sum(),
            records_out: tasks.iter().map(|t| t.records.1).sum(),
            in_per_second: sum_rates(|r| r.in_per_second),
            out_per_second: sum_rates(|r| r.out_per_second),
            state_bytes: sum(|t| t.state_bytes),
            watermark_ms: watermark_ms.filter(|w| *w != END_OF_TIME),
            event_time_ended: watermark_ms == Some(END_OF_TIME),
            backpressure: tasks
                .iter()
                .filter_map(backpressure)
                .reduce(f64::max)
                .map(Backpressure::of),
        },
        watermark_lag_ms: watermark_ms
            .filter(|w| inputs.status == JobStatus::Running && *w != END_OF_TIME)
            .map(|w| inputs.now_ms.saturating_sub(w).max(0)),
        timers_pending: sum(|t| t.timers_pending),
        dropped_late: sum(|t| t.dropped_late),
        lag: None,
        subtasks: tasks
            .iter()
            .map(|t| GraphSubtask {
                subtask: t.subtask,
                partition: t.partition,
                figures: Figures {
                    records_in: t.records.0,
                    records_out: t.records.1,
                    in_per_second: t.rate.map(|r| r.in_per_second),
                    out_per_second: t.rate.map(|r| r.out_per_second),
                    state_bytes: t.state_bytes,
                    watermark_ms: t.watermark_ms.filter(|w| *w != END_OF_TIME),
                    event_time_ended: t.watermark_ms == Some(END_OF_TIME),
                    backpressure: backpressure(t).map(Backpressure::of),
                },
                lag: None,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::serve::rates::TaskCounters;

    #[test]
    fn backpressure_is_graded_as_flink_grades_it() {
        let level = |ratio| Backpressure::of(ratio).level;
        assert_eq!(level(0.0), BackpressureLevel::Ok);
        assert_eq!(level(0.1), BackpressureLevel::Ok);
        assert_eq!(level(0.11), BackpressureLevel::Low);
        assert_eq!(level(0.5), BackpressureLevel::Low);
        assert_eq!(level(0.9), BackpressureLevel::High);
    }

    #[test]
    fn nodes_sum_their_subtasks_and_take_the_worst_backpressure() {
        let metrics = Arc::new(JobMetrics::new([("count", 2)]));
        metrics.source_records.store(300, Ordering::Relaxed);
        let subtasks = &metrics.operators[0].subtasks;
        subtasks[0].records_in.store(100, Ordering::Relaxed);
        subtasks[1].records_in.store(200, Ordering::Relaxed);
        subtasks[0]
            .snapshots
            .state_bytes
            .store(10, Ordering::Relaxed);
        subtasks[1]
            .snapshots
            .state_bytes
            .store(20, Ordering::Relaxed);
        subtasks[0].set_watermark(Some(5_000));
        subtasks[1].set_watermark(Some(4_000));
        subtasks[1].count_dropped_late(3);
        metrics.set_source_watermark(5_500);
        let pipelines = [PipelineView {
            partition: None,
            metrics: metrics.clone(),
            stage: None,
            lag: None,
        }];
        let mut rates = RateHistory::new(["count"]);
        let start = Instant::now();
        let reading = |blocked: [u64; 2]| {
            BTreeMap::from([
                ((None, 0, 0), TaskCounters::default()),
                (
                    (None, 1, 0),
                    TaskCounters {
                        blocked_us: blocked[0],
                        ..TaskCounters::default()
                    },
                ),
                (
                    (None, 1, 1),
                    TaskCounters {
                        blocked_us: blocked[1],
                        ..TaskCounters::default()
                    },
                ),
                ((None, 2, 0), TaskCounters::default()),
            ])
        };
        rates.record(reading([0, 0]), start, 1_000);
        rates.record(
            reading([50_000, 800_000]),
            start + Duration::from_secs(1),
            2_000,
        );
        let details = ["source".to_owned(), "keyed".to_owned(), "sink".to_owned()];
        let graph = graph(&GraphInputs {
            job: "job-1",
            name: "<b>counts</b>",
            status: JobStatus::Running,
            details: &details,
            topics: &[],
            pipelines: &pipelines,
            rates: &rates,
            now_ms: 6_000,
        });
        let kinds: Vec<_> = graph
            .nodes
            .iter()
            .map(|n| (n.kind, n.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (NodeKind::Source, "source"),
                (NodeKind::Operator, "count"),
                (NodeKind::Sink, "sink")
            ]
        );
        let count = &graph.nodes[1];
        let figures = &count.figures;
        assert_eq!((figures.records_in, figures.state_bytes), (300, Some(30)));
        assert_eq!(
            (figures.watermark_ms, count.watermark_lag_ms),
            (Some(4_000), Some(2_000))
        );
        assert_eq!(
            figures.backpressure.map(|b| b.level),
            Some(BackpressureLevel::High)
        );
        let levels: Vec<_> = count
            .subtasks
            .iter()
            .map(|s| s.figures.backpressure.map(|b| b.level))
            .collect();
        assert_eq!(
            levels,
            [Some(BackpressureLevel::Ok), Some(BackpressureLevel::High)]
        );
        assert_eq!(
            graph.nodes[2].figures.backpressure, None,
            "the sink sends nowhere"
        );
        // The JSON is flat: a node's figures beside its name.
        let json = serde_json::to_value(&graph.nodes[1]).expect("JSON");
        assert_eq!(json["records_in"], 300);
        assert_eq!(json["dropped_late"], 3);
        // The source shows the watermark it sends.
        assert_eq!(graph.nodes[0].figures.watermark_ms, Some(5_500));
        assert_eq!(graph.nodes[0].watermark_lag_ms, Some(500));
        let source = serde_json::to_value(&graph.nodes[0]).expect("JSON");
        assert!(source.get("dropped_late").is_none(), "{source}");
        assert_eq!(json["subtasks"][1]["backpressure"]["level"], "high");
        assert_eq!(graph.sampled_at_ms, Some(2_000));

        // Once the input ended, so did event time: no date of year 292 million.
        subtasks[0].set_watermark(Some(END_OF_TIME));
        subtasks[1].set_watermark(Some(END_OF_TIME));
        let ended = super::graph(&GraphInputs {
            job: "job-1",
            name: "counts",
            status: JobStatus::Running,
            details: &details,
            topics: &[],
            pipelines: &pipelines,
            rates: &rates,
            now_ms: 6_000,
        });
        let count = &ended.nodes[1];
        assert_eq!(count.figures.watermark_ms, None);
        assert!(count.figures.event_time_ended);
        assert_eq!(count.watermark_lag_ms, None);

        // A job that ended shows its counts, but no rates and no backpressure: its last
        // ones would read as current.
        let finished = super::graph(&GraphInputs {
            job: "job-1",
            name: "counts",
            status: JobStatus::Finished,
            details: &details,
            topics: &[],
            pipelines: &pipelines,
            rates: &rates,
            now_ms: 6_000,
        });
        for node in &finished.nodes {
            let f = &node.figures;
            assert_eq!(
                (f.in_per_second, f.out_per_second),
                (None, None),
                "{}",
                node.name
            );
            assert_eq!(f.backpressure, None, "{}", node.name);
            for s in &node.subtasks {
                assert_eq!(s.figures.backpressure, None, "{}", node.name);
                assert_eq!(s.figures.in_per_second, None, "{}", node.name);
            }
        }
        assert_eq!(finished.nodes[1].figures.records_in, 300);
    }
}

//! [`RateHistory`]: a job's records per second over the last five minutes, and each task's
//! rates and backpressure now, sampled by the host itself once a second, so that the console
//! needs no Prometheus.
//!
//! Every second the sampler ([`sample_every`]) reads the counters of every running job's
//! tasks: records in and out, and the time blocked on sending downstream
//! (`job::in_flight::Output`). The difference from the reading before gives each task's rates
//! and the share of the second it was blocked, its backpressure. The job's rates per node
//! (source, each operator, sink) go into a ring of [`KEPT`] points. Reading is a few atomic
//! loads per task: nothing on the records' path changes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Registry;
use crate::group::StagePlace;
use crate::job::JobMetrics;

/// How often the sampler reads the counters.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// Points kept: five minutes at one a second.
pub(crate) const KEPT: usize = 300;

/// One task of a pipeline: `(partition, node, subtask)`, where node 0 is the source, node
/// `i` the operator `i - 1`, and the last node the sink.
pub(crate) type TaskKey = (Option<i32>, usize, u32);

/// One pipeline of a job, as the sampler reads it: a Kafka job has one per owned partition
/// (of each stage, for one that re-keys).
#[derive(Clone, Debug)]
pub(crate) struct PipelineView {
    pub partition: Option<i32>,
    pub metrics: Arc<JobMetrics>,
    /// The stage of a Kafka job the pipeline runs; `None`: the whole job.
    pub stage: Option<Arc<StagePlace>>,
    /// Messages of its Kafka partition not read yet; `None` for a job that does not read
    /// Kafka.
    pub lag: Option<i64>,
}

/// What a node of the job's graph is in one pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Source,
    /// The pipeline's operator at this index.
    Operator(usize),
    Sink,
}

impl PipelineView {
    /// What node `node` of the job's graph (`nodes` of them: source, operators, sink) is in
    /// this pipeline, if anything: a stage of a job that re-keys runs some of the job's
    /// operators, only the first stage reads the job's input and only the last writes its
    /// sink.
    pub(crate) fn part(&self, node: usize, nodes: usize) -> Option<Part> {
        let (first, reads, writes) = match &self.stage {
            Some(stage) => (stage.first_operator, stage.index == 0, stage.last),
            None => (0, true, true),
        };
        if node == 0 {
            return reads.then_some(Part::Source);
        }
        if node + 1 == nodes {
            return writes.then_some(Part::Sink);
        }
        let operator = (node - 1).checked_sub(first)?;
        (operator < self.metrics.operators.len()).then_some(Part::Operator(operator))
    }
}

/// A task's counters at a reading.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TaskCounters {
    pub records_in: u64,
    pub records_out: u64,
    pub blocked_us: u64,
}

/// A task's rates between the last two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TaskRate {
    pub in_per_second: f64,
    pub out_per_second: f64,
    /// The share of the time it was blocked on sending downstream, 0 to 1.
    pub backpressure: f64,
}

/// One node's line in [`RatesBody`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub node: String,
    /// `in` or `out`.
    pub direction: String,
    /// Records per second; `None` for a second without a reading.
    pub values: Vec<Option<f64>>,
}

/// `GET /v1/jobs/{id}/rates`: the job's rates, columns of equal length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatesBody {
    pub interval_ms: u64,
    pub times_ms: Vec<u64>,
    pub series: Vec<Series>,
}

/// A job's rates: the ring of points and the latest rates of each task.
#[derive(Debug)]
pub(crate) struct RateHistory {
    /// Source, operators, sink.
    nodes: Vec<String>,
    last: Option<(Instant, BTreeMap<TaskKey, TaskCounters>)>,
    latest: BTreeMap<TaskKey, TaskRate>,
    latest_at_ms: Option<u64>,
    /// Unix time of each point, and per node (in, out).
    points: VecDeque<(u64, Vec<(f64, f64)>)>,
}

impl RateHistory {
    pub(crate) fn new<'a>(operators: impl IntoIterator<Item = &'a str>) -> Self {
        let mut nodes = vec!["source".to_owned()];
        nodes.extend(operators.into_iter().map(str::to_owned));
        nodes.push("sink".to_owned());
        Self {
            nodes,
            last: None,
            latest: BTreeMap::new(),
            latest_at_ms: None,
            points: VecDeque::with_capacity(KEPT),
        }
    }

    /// Reads `pipelines`' counters at `at` (Unix time `unix_ms`).
    pub(crate) fn sample(&mut self, pipelines: &[PipelineView], at: Instant, unix_ms: u64) {
        self.record(read(pipelines, self.nodes.len()), at, unix_ms);
    }

    /// Takes a reading: rates against the one before, for the tasks in both.
    pub(crate) fn record(
        &mut self,
        now: BTreeMap<TaskKey, TaskCounters>,
        at: Instant,
        unix_ms: u64,
    ) {
        if let Some((then, before)) = &self.last {
            let seconds = at.duration_since(*then).as_secs_f64();
            if seconds > 0.0 {
                self.latest = rates(before, &now, seconds);
                self.latest_at_ms = Some(unix_ms);
                let mut per_node = vec![(0.0, 0.0); self.nodes.len()];
                for ((_, node, _), rate) in &self.latest {
                    if let Some((i, o)) = per_node.get_mut(*node) {
                        *i += rate.in_per_second;
                        *o += rate.out_per_second;
                    }
                }
                if self.points.len() == KEPT {
                    self.points.pop_front();
                }
                self.points.push_back((unix_ms, per_node));
            }
        }
        self.last = Some((at, now));
    }

    /// The nodes' names: `source`, the operators', `sink`.
    pub(crate) fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The rates of task `key` at the last reading.
    pub(crate) fn task(&self, key: TaskKey) -> Option<TaskRate> {
        self.latest.get(&key).copied()
    }

    /// When the last rates were taken.
    pub(crate) fn latest_at_ms(&self) -> Option<u64> {
        self.latest_at_ms
    }

    /// Node `node`'s rates at the last reading: (in, out).
    pub(crate) fn node(&self, node: usize) -> Option<(f64, f64)> {
        self.points
            .back()
            .filter(|(at, _)| Some(*at) == self.latest_at_ms)
            .and_then(|(_, nodes)| nodes.get(node).copied())
    }

    /// The points after `since_ms` (all of them when `None`), as columns: the source's
    /// output, each operator's input and output, the sink's input.
    pub(crate) fn body(&self, since_ms: Option<u64>) -> RatesBody {
        let points: Vec<_> = self
            .points
            .iter()
            .filter(|(at, _)| since_ms.is_none_or(|since| *at > since))
            .collect();
        let column = |node: usize, out: bool| -> Vec<Option<f64>> {
            points
                .iter()
                .map(|(_, nodes)| nodes.get(node).map(|(i, o)| if out { *o } else { *i }))
                .collect()
        };
        let last = self.nodes.len() - 1;
        let mut series = Vec::new();
        for (node, name) in self.nodes.iter().enumerate() {
            for (direction, out) in [("in", false), ("out", true)] {
                // The source has no input here and the sink no output of its own.
                if (node == 0 && !out) || (node == last && out) {
                    continue;
                }
                series.push(Series {
                    node: name.clone(),
                    direction: direction.to_owned(),
                    values: column(node, out),
                });
            }
        }
        RatesBody {
            interval_ms: INTERVAL.as_millis() as u64,
            times_ms: points.iter().map(|(at, _)| *at).collect(),
            series,
        }
    }
}

/// Every task's counters now, in a job graph of `nodes` nodes.
fn read(pipelines: &[PipelineView], nodes: usize) -> BTreeMap<TaskKey, TaskCounters> {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let mut tasks = BTreeMap::new();
    for pipeline in pipelines {
        let (p, m) = (pipeline.partition, &pipeline.metrics);
        for node in 0..nodes {
            match pipeline.part(node, nodes) {
                Some(Part::Source) => {
                    let source = load(&m.source_records);
                    let blocked = load(&m.source_backpressured_us);
                    tasks.insert((p, node, 0), counters(source, source, blocked));
                }
                Some(Part::Operator(o)) => {
                    for (s, subtask) in m.operators[o].subtasks.iter().enumerate() {
                        let task = counters(
                            load(&subtask.records_in),
                            load(&subtask.records_out),
                            load(&subtask.backpressured_us),
                        );
                        tasks.insert((p, node, s as u32), task);
                    }
                }
                Some(Part::Sink) => {
                    let sink = load(&m.sink_records);
                    tasks.insert((p, node, 0), counters(sink, sink, 0));
                }
                None => {}
            }
        }
    }
    tasks
}

fn counters(records_in: u64, records_out: u64, blocked_us: u64) -> TaskCounters {
    TaskCounters {
        records_in,
        records_out,
        blocked_us,
    }
}

/// Rates over `seconds` of the tasks read both times. A counter that went back (a restore
/// set it to a checkpoint's count) gives 0, not a negative rate.
fn rates(
    before: &BTreeMap<TaskKey, TaskCounters>,
    now: &BTreeMap<TaskKey, TaskCounters>,
    seconds: f64,
) -> BTreeMap<TaskKey, TaskRate> {
    now.iter()
        .filter_map(|(key, now)| {
            let before = before.get(key)?;
            let per_second = |a: u64, b: u64| a.saturating_sub(b) as f64 / seconds;
            let blocked = now.blocked_us.saturating_sub(before.blocked_us) as f64 / 1e6;
            Some((
                *key,
                TaskRate {
                    in_per_second: per_second(now.records_in, before.records_in),
                    out_per_second: per_second(now.records_out, before.records_out),
                    backpressure: (blocked / seconds).clamp(0.0, 1.0),
                },
            ))
        })
        .collect()
}

/// Samples every running job of `registry` each [`INTERVAL`], for as long as the host runs.
pub(crate) async fn sample_every(registry: Arc<Registry>) {
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        registry.sample_rates();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(tasks: &[(TaskKey, u64, u64, u64)]) -> BTreeMap<TaskKey, TaskCounters> {
        tasks
            .iter()
            .map(|&(key, i, o, blocked)| (key, counters(i, o, blocked)))
            .collect()
    }

    #[test]
    fn rates_and_backpressure_come_from_the_difference_of_two_readings() {
        let mut history = RateHistory::new(["count"]);
        let start = Instant::now();
        history.record(
            reading(&[((None, 0, 0), 0, 0, 0), ((None, 1, 0), 0, 0, 0)]),
            start,
            1_000,
        );
        assert_eq!(
            history.body(None).times_ms,
            Vec::<u64>::new(),
            "one reading: no rate"
        );
        history.record(
            reading(&[
                ((None, 0, 0), 2_000, 2_000, 600_000),
                ((None, 1, 0), 1_000, 500, 0),
                ((None, 1, 1), 5, 5, 0),
            ]),
            start + Duration::from_secs(2),
            3_000,
        );
        let source = history.task((None, 0, 0)).expect("read twice");
        assert_eq!(source.out_per_second, 1_000.0);
        assert!(
            (source.backpressure - 0.3).abs() < 1e-9,
            "0.6 s of 2 s blocked"
        );
        assert_eq!(
            history.task((None, 1, 1)),
            None,
            "a task read once has no rate"
        );
        assert_eq!(history.node(1), Some((500.0, 250.0)));
        let body = history.body(None);
        assert_eq!(body.times_ms, vec![3_000]);
        let names: Vec<_> = body
            .series
            .iter()
            .map(|s| format!("{} {}", s.node, s.direction))
            .collect();
        assert_eq!(names, ["source out", "count in", "count out", "sink in"]);
        assert_eq!(body.series[1].values, vec![Some(500.0)]);
        assert!(history.body(Some(3_000)).times_ms.is_empty());
    }

    #[test]
    fn a_counter_that_went_back_reads_as_zero_and_the_ring_keeps_five_minutes() {
        let mut history = RateHistory::new(["count"]);
        let start = Instant::now();
        for i in 0..(KEPT as u64 + 10) {
            // Counts rise, except at 5, where a restore set them back.
            let count = if i == 5 { 0 } else { i * 100 };
            history.record(
                reading(&[((None, 1, 0), count, count, 0)]),
                start + Duration::from_secs(i),
                i * 1_000,
            );
            if i == 5 {
                assert_eq!(history.node(1), Some((0.0, 0.0)));
            }
        }
        let body = history.body(None);
        assert_eq!(body.times_ms.len(), KEPT);
        assert_eq!(body.times_ms.first(), Some(&10_000));
    }
}

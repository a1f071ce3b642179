//! `/metrics`: every job's counters in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::Registry;

/// Renders the metrics of every job of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    let jobs = registry.metrics();
    let families: [(&str, &str, &str); 5] = [
        (
            "weir_records_in_total",
            "counter",
            "Records an operator subtask received.",
        ),
        (
            "weir_records_out_total",
            "counter",
            "Records an operator subtask emitted.",
        ),
        (
            "weir_source_records_total",
            "counter",
            "Records a job's source read.",
        ),
        (
            "weir_sink_records_total",
            "counter",
            "Records a job's sink wrote.",
        ),
        (
            "weir_checkpoints_completed_total",
            "counter",
            "Checkpoints a job completed.",
        ),
    ];
    for (name, kind, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (id, job, m) in &jobs {
            let labels = format!("job_id=\"{id}\",job=\"{}\"", escape(job));
            match name {
                "weir_records_in_total" | "weir_records_out_total" => {
                    for op in &m.operators {
                        let counters = if name == "weir_records_in_total" {
                            &op.records_in
                        } else {
                            &op.records_out
                        };
                        for (subtask, c) in counters.iter().enumerate() {
                            let _ = writeln!(
                                out,
                                "{name}{{{labels},operator=\"{}\",subtask=\"{subtask}\"}} {}",
                                escape(&op.name),
                                c.load(Ordering::Relaxed)
                            );
                        }
                    }
                }
                "weir_source_records_total" => {
                    let _ = writeln!(
                        out,
                        "{name}{{{labels}}} {}",
                        m.source_records.load(Ordering::Relaxed)
                    );
                }
                "weir_sink_records_total" => {
                    let _ = writeln!(
                        out,
                        "{name}{{{labels}}} {}",
                        m.sink_records.load(Ordering::Relaxed)
                    );
                }
                _ => {
                    let _ = writeln!(
                        out,
                        "{name}{{{labels}}} {}",
                        m.checkpoints.completed.load(Ordering::Relaxed)
                    );
                }
            }
        }
    }
    let name = "weir_checkpoint_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Duration of a job's last completed checkpoint.\n# TYPE {name} gauge"
    );
    for (id, job, m) in &jobs {
        let us = m.checkpoints.last_duration_us.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}{{job_id=\"{id}\",job=\"{}\"}} {}",
            escape(job),
            us as f64 / 1e6
        );
    }
    out
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

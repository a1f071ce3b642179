//! A progress line on standard error while a job runs (only on a terminal).

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::JobMetrics;
use crate::connectors::SourceProgress;

/// Shows progress until dropped.
pub(crate) struct Progress {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Starts the display if standard error is a terminal.
    pub(crate) fn start(metrics: Arc<JobMetrics>, source: Arc<SourceProgress>) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::new(source.total.load(Ordering::Relaxed).max(1));
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let shown = bar.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                shown.set_position(source.done.load(Ordering::Relaxed));
                let read = metrics.source_records.load(Ordering::Relaxed);
                let written = metrics.sink_records.load(Ordering::Relaxed);
                // The counts continue the restored checkpoint's; the rate is this run's.
                let this_run =
                    read.saturating_sub(metrics.source_records_restored.load(Ordering::Relaxed));
                let rate = this_run as f64 / shown.elapsed().as_secs_f64().max(1e-3);
                shown.set_message(format!(
                    "{read} records read, {written} written, {rate:.0}/s"
                ));
            }
        });
        Some(Self { bar, task })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}

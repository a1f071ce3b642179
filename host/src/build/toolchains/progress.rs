//! The steps of an install: a spinner with the step and its elapsed time on a terminal, one
//! line per step elsewhere (CI logs, tests).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Reports the steps of an install on standard error.
pub(crate) struct Progress {
    spinner: Option<ProgressBar>,
    started: Instant,
}

impl Progress {
    /// A spinner when `terminal`, plain lines otherwise.
    pub(crate) fn new(terminal: bool) -> Self {
        let spinner = terminal.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            spinner,
            started: Instant::now(),
        }
    }

    /// A new step of the install begins.
    pub(crate) fn step(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.spinner {
            Some(bar) => {
                bar.reset_elapsed();
                bar.set_message(message);
            }
            None => eprintln!("  {message}"),
        }
    }

    /// A line that stays (a toolchain done, a warning), above the spinner.
    pub(crate) fn println(&self, line: impl AsRef<str>) {
        match &self.spinner {
            Some(bar) => bar.println(line.as_ref()),
            None => eprintln!("{}", line.as_ref()),
        }
    }

    /// The install is over: the spinner goes away.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }

    /// Time since the install began.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

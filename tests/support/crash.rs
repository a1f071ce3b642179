//! Killing a job at random instants and checking what it committed: the pieces the
//! exactly-once tests share.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use weir_host::checkpoint::CheckpointStore;

use super::{cache_dir, stderr};

/// A small deterministic generator (xorshift), so a failing run can be replayed from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The seed of this run: `WEIR_TEST_SEED`, else the clock; printed, to replay a failure.
pub fn seed() -> u64 {
    let seed = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    eprintln!("seed {seed} (set WEIR_TEST_SEED to replay)");
    seed
}

/// The lines of `dir/out.txt` (none if it does not exist), sorted.
pub fn committed(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("out.txt")).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Lines of `got` beyond those of `expected` (as multisets): duplicates or inventions.
pub fn extra_lines(got: &[String], expected: &[String]) -> Vec<String> {
    let mut budget: HashMap<&str, i64> = HashMap::new();
    for e in expected {
        *budget.entry(e).or_default() += 1;
    }
    got.iter()
        .filter(|g| {
            let left = budget.entry(g.as_str()).or_default();
            *left -= 1;
            *left < 0
        })
        .cloned()
        .collect()
}

/// Checks, run after run, that the complete lines of `dir/out.txt` are a part of the expected
/// output (as multisets): never a duplicate, never a line that should not be there.
///
/// A SIGKILL in the middle of the file sink's append leaves a torn last line, which is not
/// checked; the sink's `committed` marker holds the length before the append, and the next
/// run truncates the output to it before appending again. The check is incremental: the
/// budget of expected lines is counted once, and each check gives back the lines a truncation
/// removed and takes the lines appended since, so a kill loop over a million output lines
/// costs what the output changed, not the whole output per kill.
pub struct OutputCheck<'a> {
    /// Expected lines not (yet) seen in the checked text: how many more of each may appear.
    budget: HashMap<&'a str, i64>,
    /// The complete lines of the output at the last check.
    checked: String,
}

impl<'a> OutputCheck<'a> {
    pub fn new(expected: &'a [String]) -> Self {
        let mut budget: HashMap<&str, i64> = HashMap::with_capacity(expected.len());
        for line in expected {
            *budget.entry(line).or_default() += 1;
        }
        Self {
            budget,
            checked: String::new(),
        }
    }

    /// Checks `dir/out.txt` as it is now; panics naming the first line beyond the expected.
    pub fn check(&mut self, dir: &Path) {
        let text = std::fs::read_to_string(dir.join("out.txt")).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        // The text both checks share, cut back to a line's end.
        let same = self
            .checked
            .bytes()
            .zip(complete.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        let kept = self.checked.as_bytes()[..same]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        for line in self.checked[kept..].lines() {
            *self
                .budget
                .get_mut(line)
                .expect("a checked line is expected") += 1;
        }
        for line in complete[kept..].lines() {
            let left = self.budget.get_mut(line).map(|left| {
                *left -= 1;
                *left
            });
            assert!(
                left.is_some_and(|left| left >= 0),
                "committed output has a line that should not be there (a duplicate or an \
                 invention): {line:?}"
            );
        }
        self.checked = complete.to_owned();
    }
}

/// Runs `weir run job --restore latest` again and again, SIGKILLing each run after a random
/// `min_ms .. min_ms + spread_ms`, until one finishes by itself or 60 have run; after every
/// run, checks that `dir/out.txt` holds nothing beyond `expected`. Returns how many runs were
/// killed; the caller finishes the job with one more run.
pub fn kill_until_finished(
    job: &str,
    dir: &Path,
    expected: &[String],
    rng: &mut Rng,
    delays_ms: (u64, u64),
) -> usize {
    kill_until_finished_with_env(job, dir, expected, rng, delays_ms, &[])
}

/// [`kill_until_finished`], each run with the environment variables `env` added (a cloud
/// store's settings).
pub fn kill_until_finished_with_env(
    job: &str,
    dir: &Path,
    expected: &[String],
    rng: &mut Rng,
    (min_ms, spread_ms): (u64, u64),
    env: &[(String, String)],
) -> usize {
    let mut kills = 0;
    let mut check = OutputCheck::new(expected);
    for _ in 0..60 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", job, "--restore", "latest", "-q"])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("WEIR_CACHE_DIR", cache_dir())
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weir starts");
        std::thread::sleep(Duration::from_millis(min_ms + rng.below(spread_ms)));
        let finished = child.try_wait().expect("poll").is_some();
        if !finished {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let out = child.wait_with_output().expect("wait");
        if finished {
            assert!(out.status.success(), "weir failed: {}", stderr(&out));
        }
        // After every kill, what is visible is a part of the expected output: never a
        // duplicate, never a line that should not be there (but perhaps a torn last line).
        check.check(dir);
        if finished {
            return kills;
        }
    }
    kills
}

/// [`kill_until_finished`], then one last run to the end: the job must have been killed at
/// least `min_kills` times, and its output must equal `expected` exactly (`seed` is named in
/// failures, to replay them).
pub fn crash_then_finish(
    job: &str,
    dir: &Path,
    expected: &[String],
    seed_and_rng: (u64, &mut Rng),
    delays_ms: (u64, u64),
    min_kills: usize,
) {
    crash_then_finish_with_env(job, dir, expected, seed_and_rng, delays_ms, min_kills, &[]);
}

/// [`crash_then_finish`], every run with the environment variables `env` added (a cloud
/// store's settings).
pub fn crash_then_finish_with_env(
    job: &str,
    dir: &Path,
    expected: &[String],
    (seed, rng): (u64, &mut Rng),
    delays_ms: (u64, u64),
    min_kills: usize,
    env: &[(String, String)],
) {
    let kills = kill_until_finished_with_env(job, dir, expected, rng, delays_ms, env);
    eprintln!("{kills} runs killed");
    assert!(
        kills >= min_kills,
        "too few runs were killed ({kills}) to test anything"
    );
    let out = super::weir_with_env(&["run", job, "--restore", "latest", "-q"], env);
    assert!(out.status.success(), "final run failed: {}", stderr(&out));
    let got = committed(dir);
    assert_eq!(
        got.len(),
        expected.len(),
        "line count differs (seed {seed}, {kills} kills)"
    );
    assert!(
        got == expected,
        "output differs (seed {seed}, {kills} kills)"
    );
}

/// What a word counter emits for `words`: every word with its running count, sorted.
pub fn running_counts<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    let mut lines: Vec<String> = words
        .into_iter()
        .map(|word| {
            let n = counts.entry(word).or_default();
            *n += 1;
            format!("{word}\t{n}")
        })
        .collect();
    lines.sort();
    lines
}

/// Every object of the job in `store` is the metadata of a retained checkpoint or an artifact
/// one of them references: nothing orphaned, nothing missing.
pub async fn assert_store_holds_exactly_the_retained(store: &CheckpointStore) {
    let mut expected = BTreeSet::new();
    let completed = store.completed().await.expect("list checkpoints");
    assert!(!completed.is_empty(), "no checkpoint completed");
    for id in completed {
        expected.insert(store.metadata_path(id).to_string());
        let metadata = store.read_metadata(id).await.expect("read metadata");
        for artifact in metadata.artifacts() {
            expected.insert(store.resolve(&artifact.path).to_string());
        }
    }
    let present: BTreeSet<String> = store
        .list_all()
        .await
        .expect("list")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        present, expected,
        "the store must hold exactly the retained checkpoints' objects"
    );
}

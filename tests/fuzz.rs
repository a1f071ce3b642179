//! Fuzzing of everything that decodes bytes the host did not write itself: the job file, checkpoint
//! metadata, increment artifacts, the `apply` log and output batches a guest sends, and the
//! serve API's request bodies and queries. `tests/fuzz/README.md` says how to run more cases.
//!
//! Each target (`fuzz/targets.rs`) first replays its corpus, `tests/fuzz/corpus/<target>/`
//! (seeds made by the host's own encoders and real example files, and `regression-*` cases
//! that once failed), then runs `WEIR_FUZZ_CASES` mutated cases (default 2,000) from a seeded
//! random generator: byte mutations (bit flips, interesting integers, insertions,
//! truncation, splices of two entries) and mutations that know the input's structure (TOML
//! values, JSON trees, CBOR sections with their checksums made right again, operation logs).
//!
//! A case fails when it panics, runs longer than `WEIR_FUZZ_TIMEOUT_MS` (default 10,000), asks
//! for one allocation over 256 MiB or allocates over 2 GiB in all, or breaks an invariant the
//! target checks. A failing input is written to `target/fuzz-failures/<target>-<hash>`;
//! `WEIR_FUZZ_SEED` replays a run. Each target ends with `fuzz: <target> cases=N failures=K`.

#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/targets.rs"]
mod targets;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use mutate::{Rng, havoc};
use targets::{TARGETS, Target};

// ----- allocation accounting -----------------------------------------------------------------

/// Counts what each thread allocates, so that a case that trusts a length field to allocate
/// is caught.
struct CountingAllocator;

/// One allocation larger than this fails the case.
const MAX_ALLOCATION: usize = 256 << 20;
/// Allocating more than this in all, during one case, fails it.
const MAX_ALLOCATED: usize = 2 << 30;
/// Larger requests are refused outright (the process then aborts), after the input that
/// asked is saved.
const REFUSED_ALLOCATION: usize = 8 << 30;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// The input a worker runs, saved if it asks for an allocation too large to serve.
    static CURRENT: RefCell<Option<(&'static str, Vec<u8>)>> = const { RefCell::new(None) };
}

fn note(size: usize) -> bool {
    // `try_with`: a thread being torn down has no counters left.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(size)));
    if size >= REFUSED_ALLOCATION {
        let _ = CURRENT.try_with(|current| {
            if let Ok(current) = current.try_borrow()
                && let Some((target, input)) = current.as_ref()
            {
                let path = save_failure(target, input);
                eprintln!(
                    "fuzz: {target}: an allocation of {size} bytes, refused; the input: {}",
                    path.display()
                );
            }
        });
        return false;
    }
    true
}

// The counting wraps the system allocator and changes nothing else: its pointers are the
// system's.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !note(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

// ----- running cases -------------------------------------------------------------------------

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn corpus_dir(target: &str) -> PathBuf {
    repository().join("tests/fuzz/corpus").join(target)
}

fn failures_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join("target"))
        .join("fuzz-failures")
}

/// Saves a failing input as `target/fuzz-failures/<target>-<hash>`.
fn save_failure(target: &str, input: &[u8]) -> PathBuf {
    let dir = failures_dir();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!(
        "{target}-{:016x}",
        xxhash_rust::xxh3::xxh3_64(input)
    ));
    let _ = std::fs::write(&path, input);
    path
}

/// The message of the last panic on each thread, for the failure report.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let fuzzing = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("fuzz-"));
            if fuzzing {
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                *PANIC_MESSAGE.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("{message}{at}"));
            } else {
                default(info);
            }
        }));
    });
}

/// What one case came to.
struct Outcome {
    /// Why it failed, if it did.
    failure: Option<String>,
    /// The case got past the target's decoder.
    accepted: bool,
}

/// Runs cases on a thread of its own (2 MiB of stack, like tokio's threads), so that a hang
/// is seen: the caller stops waiting after the time bound.
struct Worker {
    cases: mpsc::Sender<Vec<u8>>,
    outcomes: mpsc::Receiver<Outcome>,
}

impl Worker {
    fn start(target: &'static Target) -> Self {
        let (cases, case_rx) = mpsc::channel::<Vec<u8>>();
        let (outcome_tx, outcomes) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("fuzz-{}", target.name))
            .stack_size(2 << 20)
            .spawn(move || {
                for input in case_rx {
                    CURRENT.with(|c| *c.borrow_mut() = Some((target.name, input.clone())));
                    LARGEST.with(|l| l.set(0));
                    targets::ACCEPTED.with(|a| a.set(false));
                    ALLOCATED.with(|a| a.set(0));
                    let result = catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
                    let (largest, allocated) = (LARGEST.with(Cell::get), ALLOCATED.with(Cell::get));
                    let failure = match result {
                        Err(_) => Some(format!(
                            "panicked: {}",
                            PANIC_MESSAGE
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .take()
                                .unwrap_or_default()
                        )),
                        Ok(Err(broken)) => Some(broken),
                        Ok(Ok(())) if largest > MAX_ALLOCATION => Some(format!(
                            "allocated {largest} bytes at once for an input of {} bytes",
                            input.len()
                        )),
                        Ok(Ok(())) if allocated > MAX_ALLOCATED => Some(format!(
                            "allocated {allocated} bytes in all for an input of {} bytes",
                            input.len()
                        )),
                        Ok(Ok(())) => None,
                    };
                    let accepted = targets::ACCEPTED.with(Cell::get);
                    if outcome_tx.send(Outcome { failure, accepted }).is_err() {
                        return;
                    }
                }
            })
            .expect("worker thread");
        Self { cases, outcomes }
    }

    /// Runs `input`; `None` if it did not finish within `timeout`.
    fn run(&self, input: Vec<u8>, timeout: Duration) -> Option<Outcome> {
        self.cases.send(input).ok()?;
        self.outcomes.recv_timeout(timeout).ok()
    }
}

/// The corpus of a target: every file of its folder, by name.
fn corpus(target: &Target) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target.name);
    let mut entries: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            (!name.starts_with('.')).then(|| Some((name, std::fs::read(e.path()).ok()?)))?
        })
        .collect();
    entries.sort();
    assert!(
        !entries.is_empty(),
        "the corpus of {} is empty: regenerate its seeds (see tests/fuzz/README.md)",
        target.name
    );
    entries
}

/// One mutated case: an entry of the corpus, changed by the target's structure-aware
/// mutation, by bytes, or both.
/// One mutated case: an entry of the corpus, or of the pool of mutated cases that decoded,
/// changed by the target's structure-aware mutation, by bytes, or both.
fn next_case(rng: &mut Rng, target: &Target, corpus: &[Vec<u8>], pool: &[Vec<u8>]) -> Vec<u8> {
    if rng.one_in(50) {
        let len = rng.below(256);
        return rng.bytes(len);
    }
    let from = |rng: &mut Rng| -> &Vec<u8> {
        if pool.is_empty() || rng.one_in(2) {
            rng.pick(corpus)
        } else {
            rng.pick(pool)
        }
    };
    let base = from(rng);
    let other = from(rng);
    let mut case = match rng.below(10) {
        0..=5 => (target.mutate)(rng, base).unwrap_or_else(|| base.clone()),
        6 => {
            let mut case = (target.mutate)(rng, base).unwrap_or_else(|| base.clone());
            havoc(rng, &mut case, Some(other));
            case
        }
        _ => {
            let mut case = base.clone();
            havoc(rng, &mut case, Some(other));
            case
        }
    };
    case.truncate(target.max_len);
    case
}

/// Mutated cases that decoded, kept to mutate further: a little feedback without coverage
/// instrumentation, so that cases reach past the decoders more often.
const POOL: usize = 256;

fn fuzz(name: &str) {
    install_panic_hook();
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a target of that name");
    let cases = env_number("WEIR_FUZZ_CASES", 2_000);
    let timeout = Duration::from_millis(env_number("WEIR_FUZZ_TIMEOUT_MS", 10_000));
    let seed = match std::env::var("WEIR_FUZZ_SEED") {
        Ok(_) => env_number("WEIR_FUZZ_SEED", 0),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    // Each target its own stream of cases from the same seed.
    let mut rng = Rng::new(seed ^ xxhash_rust::xxh3::xxh3_64(name.as_bytes()));
    println!("fuzz: {name} seed={seed} (replay with WEIR_FUZZ_SEED={seed})");

    let corpus = corpus(target);
    let seeds: Vec<Vec<u8>> = corpus.iter().map(|(_, bytes)| bytes.clone()).collect();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut worker = Worker::start(target);
    // Why each case failed (the same reason once, with how often and the first input).
    let mut failures: Vec<(String, u64, PathBuf)> = Vec::new();
    let mut failed = 0u64;
    let mut ran = 0u64;
    let mut accepted = 0u64;
    let started = Instant::now();
    for case in 0..corpus.len() as u64 + cases {
        let (what, input) = match corpus.get(case as usize) {
            Some((entry, bytes)) => (format!(" (corpus entry {entry})"), bytes.clone()),
            None => (String::new(), next_case(&mut rng, target, &seeds, &pool)),
        };
        ran += 1;
        match worker.run(input.clone(), timeout) {
            Some(Outcome {
                failure: None,
                accepted: a,
            }) => {
                if a {
                    accepted += 1;
                    if pool.len() < POOL {
                        pool.push(input);
                    } else {
                        let i = rng.below(POOL);
                        pool[i] = input;
                    }
                }
            }
            Some(Outcome {
                failure: Some(why), ..
            }) => note_failure(&mut failures, format!("{why}{what}"), name, &input),
            None => {
                let why = format!("ran over {} ms (a hang?){what}", timeout.as_millis());
                note_failure(&mut failures, why, name, &input);
                // The worker is stuck in that case: a new one goes on.
                worker = Worker::start(target);
            }
        }
        failed = failures.iter().map(|(_, n, _)| n).sum();
        if failures.len() >= MAX_DISTINCT_FAILURES || failed >= MAX_FAILURES {
            println!("fuzz: {name} stopped after {failed} failures");
            break;
        }
    }
    if failures.is_empty() {
        // (A worker stuck in a hang may still use them.)
        targets::remove_scratch(name);
    }
    println!(
        "fuzz: {name} cases={ran} failures={failed} (decoded: {accepted}; {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let report: Vec<String> = failures
        .iter()
        .map(|(why, n, path)| format!("{n} x {why}; the first input: {}", path.display()))
        .collect();
    assert!(
        failures.is_empty(),
        "fuzz target {name} failed (seed {seed}):\n  {}",
        report.join("\n  ")
    );
}

/// A run stops after this many different failures, or this many in all.
const MAX_DISTINCT_FAILURES: usize = 20;
const MAX_FAILURES: u64 = 500;

/// Counts a failure under its reason (a corpus entry's name is part of it); saves the input
/// the first time.
fn note_failure(failures: &mut Vec<(String, u64, PathBuf)>, why: String, name: &str, input: &[u8]) {
    match failures.iter_mut().find(|(w, _, _)| *w == why) {
        Some((_, n, _)) => *n += 1,
        None => failures.push((why, 1, save_failure(name, input))),
    }
}

#[test]
fn job_file() {
    fuzz("job_file");
}

#[test]
fn checkpoint_metadata() {
    fuzz("checkpoint_metadata");
}

#[test]
fn artifact() {
    fuzz("artifact");
}

#[test]
fn guest_apply() {
    fuzz("guest_apply");
}

#[test]
fn state_encoding() {
    fuzz("state_encoding");
}

#[test]
fn guest_batch() {
    fuzz("guest_batch");
}

#[test]
fn serve_submit() {
    fuzz("serve_submit");
}

#[test]
fn serve_query() {
    fuzz("serve_query");
}

/// Writes each target's seeds into its corpus folder (`seed-<name>`), from the host's own
/// encoders and the example job files. Run it when a format changes:
/// `cargo nextest run -p weir-host --test fuzz --run-ignored only write_seeds`.
#[test]
#[ignore = "writes the seed corpus; run by hand"]
fn write_seeds() {
    for target in TARGETS {
        let dir = corpus_dir(target.name);
        std::fs::create_dir_all(&dir).expect("corpus folder");
        for entry in std::fs::read_dir(&dir).expect("corpus folder").flatten() {
            if entry.file_name().to_string_lossy().starts_with("seed-") {
                std::fs::remove_file(entry.path()).expect("old seed");
            }
        }
        for (name, bytes) in (target.seeds)() {
            std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed");
        }
    }
}

//! In-flight data: how much may wait between a producer and a consumer, bounded by the
//! consumer's pace (buffer debloating, as Flink does it).
//!
//! Why: an aligned barrier cannot overtake records, so on every hop it waits behind all the
//! records queued before it. Queues sized in batches (eight batches of up to 1024 records)
//! cost a fast operator a millisecond or two, but a Python operator at ~4 µs per record
//! hundreds of milliseconds per hop, and a checkpoint interval of 100 ms cannot hold. Sized by
//! time, the queues in front of a slow consumer shrink and those in front of a fast one stay
//! as they were.
//!
//! How:
//! - Every channel has a [`Budget`]: the records queued in it and the most the consumer wants
//!   queued (its limit). A producer sends a batch only while fewer records than the limit are
//!   queued, so at most the limit plus one batch wait. Barriers never wait for room: they
//!   carry no records, and the channel's capacity in batches still bounds every message.
//! - The consumer measures its pace ([`Pace`]): the records it finished per second of the time
//!   it was not waiting for input. Time spent blocked on its own output counts, so a consumer
//!   held back by a slower one downstream measures the pace it is held to. Every [`WINDOW`]
//!   it sets each input's limit to what it processes in its target time, split among its
//!   inputs.
//! - Producers cut batches to at most half the limit (the source reads no more than that),
//!   so the batch a producer holds while it waits, and the one the consumer works on, are small
//!   too, and a consumer still finds a batch ready when it finishes one.
//! - The target ([`target`]) is a share of the checkpoint interval: half the interval, split
//!   evenly among the consumers a barrier passes (every operator and the sink), never under
//!   [`MIN_TARGET`]. A job without checkpoints has no target: its channels hold
//!   `channel_capacity` batches, as before.
//!
//! What it costs: a fast consumer's limit (what it processes in its target time) is above what
//! `channel_capacity` batches hold, so nothing changes for it but two atomic updates per
//! batch. A slow consumer gets smaller batches and a shorter queue, so it may now and then
//! wait for input the old queue would have held; `host/benches/checkpoint_interval.rs`
//! measures that throughput cost.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::input_gate::{Closed, Message};
use super::watermarks::WatermarkMessage;
use crate::checkpoint::protocol::Barrier;
use crate::record::RecordBatch;

/// How often a consumer measures its pace and resets its inputs' limits.
pub(crate) const WINDOW: Duration = Duration::from_millis(50);

/// The least target time: below it, queues too short to cover a scheduling hiccup would cost
/// fast consumers their throughput for no gain.
pub(crate) const MIN_TARGET: Duration = Duration::from_millis(10);

/// The smallest batch a producer cuts: smaller ones would cost more in per-batch overhead
/// (a boundary crossing, a channel message) than they save in time in flight.
pub(crate) const MIN_BATCH: usize = 64;

/// Weight of the newest pace measurement in the smoothed pace.
const SMOOTHING: f64 = 0.3;

/// The target time for each consumer of a pipeline of `operators` operators that checkpoints
/// every `interval`: half the interval split among the consumers a barrier passes on its way
/// (every operator and the sink), so that the queues a barrier waits behind add up to about
/// half the interval.
pub(crate) fn target(interval: Duration, operators: usize) -> Duration {
    let consumers = operators as u32 + 1;
    (interval / (2 * consumers)).max(MIN_TARGET)
}

/// What one channel may hold, shared by its producer and its consumer.
#[derive(Debug)]
struct Budget {
    /// Records sent and not yet received.
    queued: AtomicUsize,
    /// The most records the consumer wants queued; `usize::MAX` for no limit.
    limit: AtomicUsize,
    /// The largest batch the producer should send.
    batch: AtomicUsize,
    /// The consumer is gone: a waiting producer gives up.
    closed: AtomicBool,
    /// The producer waits on `wake` (set under `lock`), so the consumer must notify it.
    waiting: AtomicBool,
    /// Held while the producer checks for room before it waits, so no wake-up is lost.
    lock: Mutex<()>,
    /// The producer waits here for room; the consumer notifies it.
    wake: Condvar,
}

impl Budget {
    fn new(batch: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
            batch: AtomicUsize::new(batch.max(1)),
            closed: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    fn has_room(&self) -> bool {
        self.queued.load(Ordering::SeqCst) < self.limit.load(Ordering::SeqCst)
    }

    /// Blocks the (producer's) thread until fewer records than the limit are queued.
    fn wait_for_room(&self) -> Result<(), Closed> {
        if self.has_room() {
            return Ok(());
        }
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return Err(Closed);
            }
            // Announced before the check: a consumer that frees room after the check sees
            // the flag and notifies (both are sequentially consistent).
            self.waiting.store(true, Ordering::SeqCst);
            if self.has_room() {
                self.waiting.store(false, Ordering::SeqCst);
                return Ok(());
            }
            guard = self
                .wake
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Wakes the producer if it waits.
    fn notify(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.waiting.store(false, Ordering::SeqCst);
            self.wake.notify_one();
        }
    }

    /// The consumer took `records` out of the channel.
    fn release(&self, records: usize) {
        self.queued.fetch_sub(records, Ordering::SeqCst);
        self.notify();
    }

    fn set(&self, limit: usize, batch: usize) {
        self.batch.store(batch.max(1), Ordering::Relaxed);
        let before = self.limit.swap(limit, Ordering::SeqCst);
        if limit > before {
            self.notify();
        }
    }

    fn close(&self) {
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }
}

/// A channel of `capacity` messages whose consumer limits the records queued in it; batches
/// of up to `batch_size` records.
pub(crate) fn channel(capacity: usize, batch_size: usize) -> (Output, Input) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let budget = Arc::new(Budget::new(batch_size));
    (
        Output {
            tx,
            budget: budget.clone(),
            blocked_us: None,
        },
        Input { rx, budget },
    )
}

/// The producer's end of a channel.
#[derive(Debug)]
pub struct Output {
    /// The batches, barriers and watermarks to the consumer, in order.
    tx: mpsc::Sender<Message>,
    budget: Arc<Budget>,
    /// Where the producer's time blocked on this channel adds up, in microseconds: its
    /// backpressure, as the console grades it (`serve::graph`).
    blocked_us: Option<Arc<AtomicU64>>,
}

impl Output {
    /// Sends `batch`, cut into batches the consumer wants, each once there is room for it.
    /// Blocks the calling (non-async) thread.
    pub fn send(&self, batch: RecordBatch) -> Result<(), Closed> {
        let most = self.batch_size();
        if batch.len() <= most {
            return self.send_whole(batch);
        }
        for part in split(&batch, most) {
            self.send_whole(part)?;
        }
        Ok(())
    }

    /// Adds the time this producer spends blocked on the channel to `blocked_us`.
    pub fn counting_blocked_time(mut self, blocked_us: Arc<AtomicU64>) -> Self {
        self.blocked_us = Some(blocked_us);
        self
    }

    fn send_whole(&self, batch: RecordBatch) -> Result<(), Closed> {
        // The clock is read only when the producer has to wait: the common path stays two
        // atomic operations.
        let mut blocked_since = (!self.budget.has_room()).then(Instant::now);
        self.budget.wait_for_room()?;
        let records = batch.len();
        self.budget.queued.fetch_add(records, Ordering::SeqCst);
        let sent = match self.tx.try_send(Message::Batch(batch)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(message)) => {
                blocked_since.get_or_insert_with(Instant::now);
                self.tx.blocking_send(message).map_err(|_| Closed)
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed),
        };
        if let (Some(since), Some(total)) = (blocked_since, &self.blocked_us) {
            total.fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        sent
    }

    /// Sends dead letters for the job's dead-letter file `file` (on a channel from a task to
    /// the sink); like barriers, they wait only for the channel's capacity: they are few, and
    /// the sink's pace is measured on the records it writes.
    pub fn send_dead_letters(&self, file: usize, batch: RecordBatch) -> Result<(), Closed> {
        self.tx
            .blocking_send(Message::DeadLetters { file, batch })
            .map_err(|_| Closed)
    }

    /// Sends a barrier; it waits only for the channel's capacity, not for record room.
    pub fn send_barrier(&self, barrier: Barrier) -> Result<(), Closed> {
        self.tx
            .blocking_send(Message::Barrier(barrier))
            .map_err(|_| Closed)
    }

    /// Sends a watermark; like a barrier, it waits only for the channel's capacity.
    pub fn send_watermark(&self, watermark: WatermarkMessage) -> Result<(), Closed> {
        self.tx
            .blocking_send(Message::Watermark(watermark))
            .map_err(|_| Closed)
    }

    /// The largest batch the consumer wants now.
    pub fn batch_size(&self) -> usize {
        self.budget.batch.load(Ordering::Relaxed)
    }
}

/// The consumer's end of a channel.
#[derive(Debug)]
pub(crate) struct Input {
    /// The producer's batches, barriers and watermarks, in order.
    rx: mpsc::Receiver<Message>,
    budget: Arc<Budget>,
}

impl Input {
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Message::Batch(batch))) = &polled {
            self.budget.release(batch.len());
        }
        polled
    }
}

impl Drop for Input {
    /// A producer waiting for room must not wait for a consumer that is gone.
    fn drop(&mut self) {
        self.budget.close();
    }
}

/// `batch` in batches of at most `most` records, key hashes and origins kept.
fn split(batch: &RecordBatch, most: usize) -> Vec<RecordBatch> {
    let most = most.max(1);
    let per_record = batch.data_len() / batch.len().max(1) + 1;
    let mut parts = Vec::with_capacity(batch.len().div_ceil(most));
    let mut part = RecordBatch::with_capacity(most, most * per_record);
    for i in 0..batch.len() {
        part.push_from(batch, i);
        if part.len() == most {
            parts.push(std::mem::replace(
                &mut part,
                RecordBatch::with_capacity(most, most * per_record),
            ));
        }
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

/// A consumer's measure of its pace, and the limits it sets on its inputs from it.
#[derive(Debug)]
pub(crate) struct Pace {
    /// What may wait in front of the consumer, in time of its work; `None`: no limit.
    target: Option<Duration>,
    budgets: Vec<Arc<Budget>>,
    /// The job's batch size: batches never grow beyond it.
    max_batch: usize,
    window_started: Instant,
    /// Time spent waiting for input in this window.
    idle: Duration,
    /// Records finished in this window.
    done: u64,
    /// Records of the batch the consumer is working on.
    in_hand: u64,
    /// Records per second of work, smoothed; `None` before the first measurement.
    rate: Option<f64>,
}

impl Pace {
    /// The pace of the consumer of `inputs`, keeping what waits in front of it to `target` of
    /// its work (no limit when `None`).
    pub(crate) fn new(inputs: &[Input], target: Option<Duration>, max_batch: usize) -> Self {
        if target.is_some() {
            // Until the first measurement, one batch per input: queues filled before the
            // consumer's pace is known would hold the first barrier back by as much as
            // `channel_capacity` batches of the consumer's work.
            for input in inputs {
                input.budget.set(max_batch.max(1), max_batch);
            }
        }
        Self {
            target,
            budgets: inputs.iter().map(|i| i.budget.clone()).collect(),
            max_batch: max_batch.max(1),
            window_started: Instant::now(),
            idle: Duration::ZERO,
            done: 0,
            in_hand: 0,
            rate: None,
        }
    }

    /// The consumer asks for input: the batch it had is finished.
    pub(crate) fn asking(&mut self) {
        self.done += std::mem::take(&mut self.in_hand);
    }

    /// The consumer waited `waited` for input and got a batch of `records` (0 for anything
    /// else) at `now`.
    pub(crate) fn received(&mut self, waited: Duration, records: usize, now: Instant) {
        if self.target.is_none() {
            return;
        }
        self.idle += waited;
        self.in_hand = records as u64;
        if now.duration_since(self.window_started) >= WINDOW {
            self.measure(now);
        }
    }

    /// Records per second of work, smoothed, once measured.
    #[cfg(test)]
    pub(crate) fn rate(&self) -> Option<f64> {
        self.rate
    }

    fn measure(&mut self, now: Instant) {
        let busy = now
            .duration_since(self.window_started)
            .saturating_sub(self.idle);
        // A window spent mostly waiting says little about the consumer's pace.
        if busy >= WINDOW / 10 && self.done > 0 {
            let sample = self.done as f64 / busy.as_secs_f64();
            let rate = self.rate.map_or(sample, |r| r + SMOOTHING * (sample - r));
            self.rate = Some(rate);
            self.apply(rate);
        }
        self.window_started = now;
        self.idle = Duration::ZERO;
        self.done = 0;
    }

    fn apply(&self, rate: f64) {
        let Some(target) = self.target else {
            return;
        };
        let inputs = self.budgets.len().max(1) as f64;
        let limit = (rate * target.as_secs_f64() / inputs).max(MIN_BATCH as f64);
        let limit = if limit >= usize::MAX as f64 {
            usize::MAX
        } else {
            limit as usize
        };
        let batch = (limit / 2).clamp(MIN_BATCH, self.max_batch.max(MIN_BATCH));
        let batch = batch.min(self.max_batch);
        for budget in &self.budgets {
            budget.set(limit, batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::partition::KeyHash;
    use crate::record::RecordRef;

    fn batch(records: usize) -> RecordBatch {
        let mut b = RecordBatch::new();
        for i in 0..records {
            b.push_hashed(
                RecordRef::keyed(b"k", format!("{i}").as_bytes()),
                KeyHash(i as u64),
            );
        }
        b
    }

    fn recv(input: &mut Input) -> Option<Message> {
        futures::executor::block_on(std::future::poll_fn(|cx| input.poll_recv(cx)))
    }

    #[test]
    fn a_producer_waits_while_the_limit_is_queued_and_goes_on_when_the_consumer_takes_records() {
        let (output, mut input) = channel(8, 100);
        let blocked_us = Arc::new(AtomicU64::new(0));
        let output = output.counting_blocked_time(blocked_us.clone());
        input.budget.set(150, 100);
        output.send(batch(100)).expect("room");
        output.send(batch(100)).expect("100 < 150: room");
        assert_eq!(
            blocked_us.load(Ordering::SeqCst),
            0,
            "sends with room never wait"
        );
        let sent = Arc::new(AtomicU64::new(0));
        let producer = {
            let sent = sent.clone();
            std::thread::spawn(move || {
                output.send(batch(100)).expect("room after a receive");
                sent.store(1, Ordering::SeqCst);
                output
            })
        };
        // Until the producer says it waits (whenever its thread gets to run).
        let deadline = Instant::now() + Duration::from_secs(60);
        while !input.budget.waiting.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the producer never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        let waiting_since = Instant::now();
        assert_eq!(sent.load(Ordering::SeqCst), 0, "200 queued, limit 150");
        let waited = waiting_since.elapsed();
        assert!(matches!(recv(&mut input), Some(Message::Batch(b)) if b.len() == 100));
        let output = producer.join().expect("producer");
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        // The wait counts as the producer's backpressure: all of it, from before it said it
        // waits until after the receive.
        let blocked = blocked_us.load(Ordering::SeqCst);
        assert!(
            u128::from(blocked) >= waited.as_micros(),
            "blocked {blocked} µs, waited at least {waited:?}"
        );
        // A barrier needs no room.
        output
            .send_barrier(Barrier::new(crate::ids::CheckpointId(1), false))
            .expect("barrier");
    }

    #[test]
    fn a_waiting_producer_gives_up_when_the_consumer_is_gone() {
        let (output, input) = channel(8, 10);
        input.budget.set(MIN_BATCH, MIN_BATCH);
        output.send(batch(MIN_BATCH)).expect("room");
        let producer = std::thread::spawn(move || output.send(batch(1)));
        std::thread::sleep(Duration::from_millis(20));
        drop(input);
        assert_eq!(producer.join().expect("producer"), Err(Closed));
    }

    #[test]
    fn batches_are_cut_to_what_the_consumer_wants_with_their_hashes() {
        let (output, mut input) = channel(8, 1024);
        input.budget.set(usize::MAX, 300);
        output.send(batch(1000)).expect("send");
        let mut seen = 0;
        for expected in [300, 300, 300, 100] {
            let Some(Message::Batch(b)) = recv(&mut input) else {
                panic!("expected a batch");
            };
            assert_eq!(b.len(), expected);
            for (i, r) in b.iter().enumerate() {
                assert_eq!(r.value, format!("{seen}").as_bytes());
                assert_eq!(b.hashes()[i], KeyHash(seen as u64));
                seen += 1;
            }
        }
    }

    #[test]
    fn a_slow_consumer_limits_its_inputs_to_its_target_time_and_a_fast_one_does_not() {
        let target = Duration::from_millis(20);
        let (_a, a) = channel(8, 1024);
        let (_b, b) = channel(8, 1024);
        let inputs = [a, b];
        let mut pace = Pace::new(&inputs, Some(target), 1024);
        // 10 000 records per second of work: a batch of 100 every 10 ms, never waiting.
        let start = pace.window_started;
        for i in 0..=20u32 {
            pace.asking();
            pace.received(Duration::ZERO, 100, start + Duration::from_millis(10) * i);
        }
        let rate = pace.rate().expect("measured");
        assert!((rate - 10_000.0).abs() < 1.0, "{rate}");
        // 20 ms of work = 200 records, split between two inputs; batches at least MIN_BATCH.
        for input in &inputs {
            assert_eq!(input.budget.limit.load(Ordering::SeqCst), 100);
            assert_eq!(input.budget.batch.load(Ordering::SeqCst), MIN_BATCH);
        }
        // Time spent waiting for input does not slow the measured pace down.
        let mut idle = Pace::new(&inputs, Some(target), 1024);
        let start = idle.window_started;
        idle.received(Duration::ZERO, 100, start);
        for i in 1..=20u32 {
            idle.asking();
            idle.received(
                Duration::from_millis(90),
                100,
                start + Duration::from_millis(100) * i,
            );
        }
        let rate = idle.rate().expect("measured");
        assert!((rate - 10_000.0).abs() < 1.0, "{rate}");

        // 10 M records per second: 200 000 records in 20 ms, more than eight batches.
        let (_c, c) = channel(8, 1024);
        let inputs = [c];
        let mut fast = Pace::new(&inputs, Some(target), 1024);
        // Before the first measurement, one batch.
        assert_eq!(inputs[0].budget.limit.load(Ordering::SeqCst), 1024);
        let start = fast.window_started;
        for i in 0..=1000u32 {
            fast.asking();
            fast.received(Duration::ZERO, 1024, start + Duration::from_micros(102) * i);
        }
        assert!(inputs[0].budget.limit.load(Ordering::SeqCst) > 8 * 1024);
        assert_eq!(inputs[0].budget.batch.load(Ordering::SeqCst), 1024);

        // Without a target, nothing is limited.
        let (_d, d) = channel(8, 1024);
        let inputs = [d];
        let mut unbounded = Pace::new(&inputs, None, 1024);
        let start = unbounded.window_started;
        for i in 1..=20u32 {
            unbounded.asking();
            unbounded.received(Duration::ZERO, 100, start + Duration::from_millis(10) * i);
        }
        assert_eq!(inputs[0].budget.limit.load(Ordering::SeqCst), usize::MAX);
    }

    #[test]
    fn the_target_shares_half_the_interval_among_the_consumers() {
        // Two operators and the sink: 120 ms / 2 / 3.
        assert_eq!(
            target(Duration::from_millis(120), 2),
            Duration::from_millis(20)
        );
        assert_eq!(target(Duration::from_millis(5), 2), MIN_TARGET);
    }
}

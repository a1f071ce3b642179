//! [`InputGate`]: how a task reads its inputs, aligning checkpoint barriers.
//!
//! A task with several producers has one channel per producer, so that barrier alignment can
//! stop reading exactly the inputs whose barrier has arrived: records behind a barrier belong
//! to the next checkpoint and must not reach the operator before its snapshot. Once the
//! barrier has come on every input, the gate hands it to the task and reads all inputs again.
//! A blocked input holds back its producer through its bounded channel, so alignment never
//! buffers.
//!
//! The gate also delivers the coordinator's notifications, so a task waiting for records still
//! learns that a checkpoint completed (and commits or cleans up).
//!
//! It measures what a barrier cost the task ([`InputGate::barrier_timing`]): its start delay
//! (trigger to first arrival, the time it waited in queues) and its alignment (first arrival
//! to last). And it keeps the task's [`Pace`], which bounds the records queued in front of
//! the task by time (`job::in_flight`).

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use super::in_flight::{Input, Pace};
use super::watermarks::{InputWatermarks, WatermarkChange, WatermarkMessage};
use crate::checkpoint::metadata::BarrierTiming;
use crate::checkpoint::protocol::{Barrier, Notification};
use crate::record::RecordBatch;

/// What flows through a channel between tasks.
#[derive(Debug)]
pub(crate) enum Message {
    Batch(RecordBatch),
    /// Dead letters for the job's dead-letter file `file` (only on the channels from every
    /// task to the sink, see [`super::bad_records`]).
    DeadLetters {
        file: usize,
        batch: RecordBatch,
    },
    /// Everything before it belongs to the barrier's checkpoint. After a `last` barrier the
    /// producer sends nothing more.
    Barrier(Barrier),
    /// The producer's event time (`job::watermarks`).
    Watermark(WatermarkMessage),
}

/// What a task reads next.
#[derive(Debug)]
pub(crate) enum Event {
    Batch(RecordBatch),
    DeadLetters {
        file: usize,
        batch: RecordBatch,
    },
    /// The barrier has arrived on every input.
    Barrier(Barrier),
    Notification(Notification),
    /// The task's watermark changed.
    Watermark(WatermarkChange),
    /// The deadline given to [`InputGate::recv_until`] passed first.
    Deadline,
}

/// An input or the coordinator went away before the end: another task failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// A task's inputs and its notification channel.
pub(crate) struct InputGate {
    inputs: Vec<Input>,
    /// Inputs whose barrier arrived and that wait for the others.
    blocked: Vec<bool>,
    waiting_for: usize,
    /// When the barrier being aligned first arrived, and its start delay.
    first_barrier: Option<(Instant, Duration)>,
    /// What the last barrier delivered cost (no synchronous pause: the task adds it).
    barrier_timing: BarrierTiming,
    pace: Pace,
    /// The last barrier has been delivered: only notifications come now.
    ended: bool,
    /// The coordinator's completions and aborts, for this task.
    notifications: UnboundedReceiver<Notification>,
    /// Where the next round-robin poll starts, so no input starves the others.
    next: usize,
    /// The watermark over the record inputs (dead-letter inputs carry none).
    watermarks: InputWatermarks,
    /// Watermark changes not delivered yet.
    changes: std::collections::VecDeque<WatermarkChange>,
    scratch: Vec<WatermarkChange>,
}

impl InputGate {
    /// The gate over `inputs`, keeping the records queued in them to about `target` of the
    /// task's work (no limit when `None`) and batches to at most `batch_size` records.
    pub(crate) fn new(
        inputs: Vec<Input>,
        notifications: UnboundedReceiver<Notification>,
        target: Option<Duration>,
        batch_size: usize,
    ) -> Self {
        let n = inputs.len();
        Self {
            pace: Pace::new(&inputs, target, batch_size),
            inputs,
            blocked: vec![false; n],
            waiting_for: n,
            first_barrier: None,
            barrier_timing: BarrierTiming::default(),
            ended: false,
            notifications,
            next: 0,
            watermarks: InputWatermarks::new(n, None),
            changes: Default::default(),
            scratch: Vec::new(),
        }
    }

    /// Starts the task's watermark at `restored` (a restored checkpoint's): it never goes
    /// below it.
    pub(crate) fn restoring_watermark(mut self, restored: Option<i64>) -> Self {
        self.watermarks.restore_floor(restored);
        self
    }

    /// The task's watermark.
    pub(crate) fn watermark(&self) -> Option<i64> {
        self.watermarks.current()
    }

    /// The gate with `inputs` added that carry dead letters (to the sink): they take part in
    /// barrier alignment, but not in the pace that bounds the records queued in front of the
    /// task, whose limit they would only split.
    pub(crate) fn with_dead_letters(mut self, inputs: Vec<Input>) -> Self {
        let n = self.inputs.len() + inputs.len();
        self.inputs.extend(inputs);
        self.blocked = vec![false; n];
        self.waiting_for = n;
        self
    }

    /// Blocks the calling (non-async) thread until something arrives. The task has finished
    /// what it received before.
    pub(crate) fn recv(&mut self) -> Result<Event, Closed> {
        self.recv_until(None)
    }

    /// [`Self::recv`], or [`Event::Deadline`] once `deadline` passes first. A deadline needs
    /// the tokio runtime (the task runs on one of its blocking threads).
    pub(crate) fn recv_until(&mut self, deadline: Option<Instant>) -> Result<Event, Closed> {
        self.pace.asking();
        let asked = Instant::now();
        let next = std::future::poll_fn(|cx| self.poll_next(cx));
        let event = match deadline {
            None => futures::executor::block_on(next)?,
            Some(deadline) => tokio::runtime::Handle::current().block_on(async {
                tokio::time::timeout_at(deadline.into(), next)
                    .await
                    .unwrap_or(Ok(Event::Deadline))
            })?,
        };
        let now = Instant::now();
        let records = match &event {
            Event::Batch(batch) => batch.len(),
            _ => 0,
        };
        self.pace.received(now - asked, records, now);
        Ok(event)
    }

    /// What the last barrier delivered cost: its start delay and alignment.
    pub(crate) fn barrier_timing(&self) -> BarrierTiming {
        self.barrier_timing
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event, Closed>> {
        if let Poll::Ready(n) = self.notifications.poll_recv(cx) {
            return Poll::Ready(n.map(Event::Notification).ok_or(Closed));
        }
        if let Some(change) = self.changes.pop_front() {
            return Poll::Ready(Ok(Event::Watermark(change)));
        }
        if self.ended {
            return Poll::Pending;
        }
        let n = self.inputs.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.blocked[i] {
                continue;
            }
            match self.inputs[i].poll_recv(cx) {
                Poll::Ready(Some(Message::Batch(batch))) => {
                    self.next = (i + 1) % n;
                    self.watermarks.on_records(i, &mut self.scratch);
                    self.changes.extend(self.scratch.drain(..));
                    return Poll::Ready(Ok(Event::Batch(batch)));
                }
                Poll::Ready(Some(Message::Watermark(message))) => {
                    self.next = (i + 1) % n;
                    self.watermarks.on_message(i, message, &mut self.scratch);
                    self.changes.extend(self.scratch.drain(..));
                    if let Some(change) = self.changes.pop_front() {
                        return Poll::Ready(Ok(Event::Watermark(change)));
                    }
                    // Nothing changed: read on, at the next input.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Message::DeadLetters { file, batch })) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Ok(Event::DeadLetters { file, batch }));
                }
                Poll::Ready(Some(Message::Barrier(barrier))) => {
                    self.blocked[i] = true;
                    self.waiting_for -= 1;
                    // One reading of the clock for this arrival: with one input, the first
                    // arrival is the last and the alignment is exactly zero.
                    let now = Instant::now();
                    let (first, start_delay) = *self
                        .first_barrier
                        .get_or_insert_with(|| (now, barrier.age()));
                    if self.waiting_for == 0 {
                        self.blocked.fill(false);
                        self.waiting_for = n;
                        self.ended = barrier.last;
                        self.first_barrier = None;
                        self.barrier_timing = BarrierTiming {
                            start_delay_us: start_delay.as_micros() as u64,
                            alignment_us: now.duration_since(first).as_micros() as u64,
                            sync_pause_us: 0,
                        };
                        return Poll::Ready(Ok(Event::Barrier(barrier)));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(Err(Closed)),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use tokio::sync::mpsc;

    use super::*;
    use crate::ids::CheckpointId;
    use crate::job::in_flight::{Output, channel};
    use crate::record::RecordRef;

    fn batch(value: &[u8]) -> RecordBatch {
        let mut b = RecordBatch::new();
        b.push(RecordRef::unkeyed(value));
        b
    }

    fn barrier(id: u64, last: bool) -> Barrier {
        Barrier::new(CheckpointId(id), last)
    }

    fn value(event: Event) -> Vec<u8> {
        match event {
            Event::Batch(b) => b.get(0).value.to_vec(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    /// A gate over `n` inputs, without a limit in time.
    fn gate(n: usize) -> (Vec<Output>, InputGate, mpsc::UnboundedSender<Notification>) {
        let (outputs, inputs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel(8, 16)).unzip();
        let (n_tx, n_rx) = mpsc::unbounded_channel();
        (outputs, InputGate::new(inputs, n_rx, None, 16), n_tx)
    }

    #[test]
    fn records_behind_a_barrier_wait_until_it_arrived_on_every_input() {
        let (outputs, mut gate, _n_tx) = gate(2);
        let (a, b) = (&outputs[0], &outputs[1]);
        a.send_barrier(barrier(1, false)).expect("send");
        a.send(batch(b"a-after")).expect("send");
        b.send(batch(b"b-before")).expect("send");
        // Input a is blocked behind its barrier: b's record comes first.
        assert_eq!(value(gate.recv().expect("event")), b"b-before");
        b.send_barrier(barrier(1, false)).expect("send");
        match gate.recv().expect("event") {
            Event::Barrier(b) => assert_eq!(b.checkpoint, CheckpointId(1)),
            other => panic!("expected the barrier, got {other:?}"),
        }
        assert_eq!(value(gate.recv().expect("event")), b"a-after");
    }

    #[test]
    fn a_barrier_s_start_delay_and_alignment_are_measured() {
        let (outputs, mut gate, _n_tx) = gate(2);
        let made = Instant::now();
        let triggered = Barrier {
            triggered_at: SystemTime::now() - Duration::from_millis(300),
            ..barrier(4, false)
        };
        outputs[0].send_barrier(triggered).expect("send");
        outputs[1].send(batch(b"before")).expect("send");
        assert_eq!(value(gate.recv().expect("event")), b"before");
        std::thread::sleep(Duration::from_millis(30));
        outputs[1].send_barrier(triggered).expect("send");
        assert!(matches!(gate.recv(), Ok(Event::Barrier(_))));
        let since_made = made.elapsed().as_micros() as u64;
        let timing = gate.barrier_timing();
        // 300 ms in queues before the first arrival, and no more than the test took (and a
        // little for the two clocks); 30 ms or more until the second, within the same.
        let slack = 10_000;
        assert!(
            (300_000..=300_000 + since_made + slack).contains(&timing.start_delay_us),
            "{timing:?}"
        );
        assert!(
            (30_000..=since_made).contains(&timing.alignment_us),
            "{timing:?}"
        );

        // One input: nothing to align.
        let (outputs, mut gate, _n_tx) = super::tests::gate(1);
        outputs[0].send_barrier(barrier(5, false)).expect("send");
        assert!(matches!(gate.recv(), Ok(Event::Barrier(_))));
        assert_eq!(gate.barrier_timing().alignment_us, 0);
    }

    #[test]
    fn after_the_last_barrier_only_notifications_come_and_a_lost_input_is_an_error() {
        let (mut outputs, mut gate, n_tx) = gate(1);
        outputs[0].send_barrier(barrier(3, true)).expect("send");
        outputs.clear();
        assert!(matches!(gate.recv(), Ok(Event::Barrier(b)) if b.last));
        n_tx.send(Notification::Abort(CheckpointId(3)))
            .expect("send");
        assert!(matches!(gate.recv(), Ok(Event::Notification(_))));
        drop(n_tx);
        assert_eq!(gate.recv().map(|_| ()), Err(Closed));

        let (mut outputs, mut gate, _n_tx) = super::tests::gate(1);
        outputs.clear();
        assert_eq!(gate.recv().map(|_| ()), Err(Closed));
    }
}

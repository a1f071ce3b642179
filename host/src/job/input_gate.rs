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

use std::task::{Context, Poll};

use tokio::sync::mpsc::{Receiver, UnboundedReceiver};

use crate::checkpoint::protocol::{Barrier, Notification};
use crate::record::RecordBatch;

/// What flows through a channel between tasks.
#[derive(Debug)]
pub enum Message {
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
}

/// What a task reads next.
#[derive(Debug)]
pub enum Event {
    Batch(RecordBatch),
    DeadLetters {
        file: usize,
        batch: RecordBatch,
    },
    /// The barrier has arrived on every input.
    Barrier(Barrier),
    Notification(Notification),
}

/// An input or the coordinator went away before the end: another task failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// A task's inputs and its notification channel.
pub struct InputGate {
    inputs: Vec<Receiver<Message>>,
    /// Inputs whose barrier arrived and that wait for the others.
    blocked: Vec<bool>,
    waiting_for: usize,
    /// The last barrier has been delivered: only notifications come now.
    ended: bool,
    notifications: UnboundedReceiver<Notification>,
    /// Where the next round-robin poll starts, so no input starves the others.
    next: usize,
}

impl InputGate {
    pub fn new(
        inputs: Vec<Receiver<Message>>,
        notifications: UnboundedReceiver<Notification>,
    ) -> Self {
        let n = inputs.len();
        Self {
            inputs,
            blocked: vec![false; n],
            waiting_for: n,
            ended: false,
            notifications,
            next: 0,
        }
    }

    /// Blocks the calling (non-async) thread until something arrives.
    pub fn recv(&mut self) -> Result<Event, Closed> {
        futures::executor::block_on(std::future::poll_fn(|cx| self.poll_next(cx)))
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event, Closed>> {
        if let Poll::Ready(n) = self.notifications.poll_recv(cx) {
            return Poll::Ready(n.map(Event::Notification).ok_or(Closed));
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
                    return Poll::Ready(Ok(Event::Batch(batch)));
                }
                Poll::Ready(Some(Message::DeadLetters { file, batch })) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Ok(Event::DeadLetters { file, batch }));
                }
                Poll::Ready(Some(Message::Barrier(barrier))) => {
                    self.blocked[i] = true;
                    self.waiting_for -= 1;
                    if self.waiting_for == 0 {
                        self.blocked.fill(false);
                        self.waiting_for = n;
                        self.ended = barrier.last;
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
    use tokio::sync::mpsc;

    use super::*;
    use crate::ids::CheckpointId;
    use crate::record::RecordRef;

    fn batch(value: &[u8]) -> Message {
        let mut b = RecordBatch::new();
        b.push(RecordRef::unkeyed(value));
        Message::Batch(b)
    }

    fn barrier(id: u64, last: bool) -> Message {
        Message::Barrier(Barrier {
            checkpoint: CheckpointId(id),
            last,
        })
    }

    fn value(event: Event) -> Vec<u8> {
        match event {
            Event::Batch(b) => b.get(0).value.to_vec(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn records_behind_a_barrier_wait_until_it_arrived_on_every_input() {
        let (a_tx, a_rx) = mpsc::channel(8);
        let (b_tx, b_rx) = mpsc::channel(8);
        let (_n_tx, n_rx) = mpsc::unbounded_channel();
        let mut gate = InputGate::new(vec![a_rx, b_rx], n_rx);
        a_tx.try_send(barrier(1, false)).expect("send");
        a_tx.try_send(batch(b"a-after")).expect("send");
        b_tx.try_send(batch(b"b-before")).expect("send");
        // Input a is blocked behind its barrier: b's record comes first.
        assert_eq!(value(gate.recv().expect("event")), b"b-before");
        b_tx.try_send(barrier(1, false)).expect("send");
        match gate.recv().expect("event") {
            Event::Barrier(b) => assert_eq!(b.checkpoint, CheckpointId(1)),
            other => panic!("expected the barrier, got {other:?}"),
        }
        assert_eq!(value(gate.recv().expect("event")), b"a-after");
    }

    #[test]
    fn after_the_last_barrier_only_notifications_come_and_a_lost_input_is_an_error() {
        let (a_tx, a_rx) = mpsc::channel(8);
        let (n_tx, n_rx) = mpsc::unbounded_channel();
        let mut gate = InputGate::new(vec![a_rx], n_rx);
        a_tx.try_send(barrier(3, true)).expect("send");
        drop(a_tx);
        assert!(matches!(gate.recv(), Ok(Event::Barrier(b)) if b.last));
        n_tx.send(Notification::Abort(CheckpointId(3)))
            .expect("send");
        assert!(matches!(gate.recv(), Ok(Event::Notification(_))));
        drop(n_tx);
        assert_eq!(gate.recv().map(|_| ()), Err(Closed));

        let (a_tx, a_rx) = mpsc::channel::<Message>(8);
        let (_n_tx, n_rx) = mpsc::unbounded_channel();
        let mut gate = InputGate::new(vec![a_rx], n_rx);
        drop(a_tx);
        assert_eq!(gate.recv().map(|_| ()), Err(Closed));
    }
}

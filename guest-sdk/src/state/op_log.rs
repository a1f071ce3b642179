//! The log of state writes sent to the host in one `apply` call.

use crate::bindings::weir::operator::state::{OpKind, StateId};
use crate::state::host::StateHost;
use crate::{Error, Result};

/// Bytes per operation in the WIT `apply` log: five little-endian u32 words (kind, state,
/// slot, key end, value end).
const OP_BYTES: usize = 20;

/// Pending writes: operations and their bytes, laid out as the WIT `apply` arguments.
///
/// Both vectors are cleared, not dropped, after each `apply`, so a steady state reuses them.
#[derive(Default)]
pub(crate) struct OpLog {
    /// The encoded operations, `OP_BYTES` each.
    ops: Vec<u8>,
    data: Vec<u8>,
    /// The (state, slot) pairs of the pending map and list writes: a read of a map or list
    /// sends the log first only if it holds writes to that map or list.
    written: WrittenSlots,
}

/// A set of (state, slot) pairs: a bit per slot for each state written.
///
/// Not a `HashSet`: a write is one of the commonest calls of a batch, and hashing every one
/// (SipHash, in Wasm) cost a keyed count 7 % of its time. Slots are a batch's dense key
/// numbers and few states are maps or lists, so a bit vector per state is exact and costs a
/// short scan and a bit operation.
#[derive(Default)]
struct WrittenSlots {
    /// Each written state with its bits, by slot; kept (zeroed) across batches.
    states: Vec<(StateId, Vec<u64>)>,
}

impl WrittenSlots {
    fn insert(&mut self, state: StateId, slot: u32) {
        let bits = match self.states.iter().position(|(s, _)| *s == state) {
            Some(i) => &mut self.states[i].1,
            None => {
                self.states.push((state, Vec::new()));
                &mut self.states.last_mut().expect("just pushed").1
            }
        };
        let word = slot as usize / 64;
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << (slot % 64);
    }

    fn contains(&self, state: StateId, slot: u32) -> bool {
        self.states
            .iter()
            .find(|(s, _)| *s == state)
            .and_then(|(_, bits)| bits.get(slot as usize / 64))
            .is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    fn clear(&mut self) {
        for (_, bits) in &mut self.states {
            bits.fill(0);
        }
    }
}

/// Writes an operation's map key or value into the log's data.
pub(crate) type WriteBytes<'a> = &'a mut dyn FnMut(&mut Vec<u8>) -> Result<()>;

impl OpLog {
    /// Appends one operation: `key` writes its map key (if the kind takes one), then `value`
    /// writes its value (if the kind takes one). If either fails, the log is unchanged.
    pub(crate) fn push(
        &mut self,
        kind: OpKind,
        state: StateId,
        slot: u32,
        key: Option<WriteBytes<'_>>,
        value: Option<WriteBytes<'_>>,
    ) -> Result<()> {
        let start = self.data.len();
        match self.write(key, value) {
            Ok((key_end, value_end)) => {
                let mut op = [0; OP_BYTES];
                let words = [kind as u32, state, slot, key_end, value_end];
                for (bytes, word) in op.chunks_exact_mut(4).zip(words) {
                    bytes.copy_from_slice(&word.to_le_bytes());
                }
                self.ops.extend_from_slice(&op);
                // Only map and list reads ask (a value read is served by the batch's cache).
                if !matches!(
                    kind,
                    OpKind::ValueSet
                        | OpKind::ValueRemove
                        | OpKind::TimerRegister
                        | OpKind::TimerDelete
                ) {
                    self.written.insert(state, slot);
                }
                Ok(())
            }
            Err(error) => {
                self.data.truncate(start);
                Err(error)
            }
        }
    }

    fn write(
        &mut self,
        key: Option<WriteBytes<'_>>,
        value: Option<WriteBytes<'_>>,
    ) -> Result<(u32, u32)> {
        if let Some(key) = key {
            key(&mut self.data)?;
        }
        let key_end = self.offset()?;
        if let Some(value) = value {
            value(&mut self.data)?;
        }
        Ok((key_end, self.offset()?))
    }

    fn offset(&self) -> Result<u32> {
        u32::try_from(self.data.len()).map_err(|_| {
            Error::new("the state writes of one batch exceed 4 GiB; use smaller batches")
        })
    }

    /// Sends the pending writes to the host in one `apply` call, if there are any, and empties
    /// the log (also on error: the host applied a prefix, and the job fails).
    pub(crate) fn flush(&mut self, host: &mut dyn StateHost) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let result = host.apply(&self.ops, &self.data);
        self.clear();
        result.map_err(|e| Error::new(format!("applying state writes: {e}")))
    }

    /// Drops the pending writes.
    pub(crate) fn clear(&mut self) {
        self.ops.clear();
        self.data.clear();
        self.written.clear();
    }

    /// Whether writes to `state` for `slot` are pending.
    pub(crate) fn writes_to(&self, state: StateId, slot: u32) -> bool {
        self.written.contains(state, slot)
    }

    #[cfg(test)]
    pub(crate) fn parts(&self) -> (Vec<Op>, &[u8]) {
        (decode(&self.ops), &self.data)
    }
}

/// One decoded operation of an `apply` log (for tests, which check what a guest sends).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Op {
    pub(crate) kind: OpKind,
    pub(crate) state: StateId,
    pub(crate) slot: u32,
    pub(crate) key_end: u32,
    pub(crate) value_end: u32,
}

/// The operations of an encoded `apply` log.
#[cfg(test)]
pub(crate) fn decode(ops: &[u8]) -> Vec<Op> {
    assert!(
        ops.len().is_multiple_of(OP_BYTES),
        "a whole number of operations"
    );
    let kinds = [
        OpKind::ValueSet,
        OpKind::ValueRemove,
        OpKind::MapPut,
        OpKind::MapRemove,
        OpKind::MapClear,
        OpKind::ListAppend,
        OpKind::ListClear,
        OpKind::TimerRegister,
        OpKind::TimerDelete,
    ];
    ops.chunks_exact(OP_BYTES)
        .map(|op| {
            let mut words = [0u32; 5];
            for (word, b) in words.iter_mut().zip(op.chunks_exact(4)) {
                *word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            let [kind, state, slot, key_end, value_end] = words;
            let kind = kinds[kind as usize];
            assert_eq!(kind as u32, words[0], "ordinals follow the WIT order");
            Op {
                kind,
                state,
                slot,
                key_end,
                value_end,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    fn bytes(b: &'static [u8]) -> impl FnMut(&mut Vec<u8>) -> Result<()> {
        move |data| {
            data.extend_from_slice(b);
            Ok(())
        }
    }

    #[test]
    fn lays_out_keys_and_values_back_to_back() -> Result<()> {
        let mut log = OpLog::default();
        log.push(
            OpKind::MapPut,
            3,
            0,
            Some(&mut bytes(b"key")),
            Some(&mut bytes(b"value")),
        )?;
        log.push(OpKind::MapRemove, 3, 1, Some(&mut bytes(b"k")), None)?;
        log.push(OpKind::MapClear, 3, 2, None, None)?;
        log.push(
            OpKind::ListAppend,
            4,
            0,
            None,
            Some(&mut |d: &mut Vec<u8>| codec::encode_into("x", d)),
        )?;
        log.push(
            OpKind::ValueSet,
            5,
            7,
            None,
            Some(&mut |d: &mut Vec<u8>| codec::encode_into(&1u64, d)),
        )?;
        log.push(OpKind::ValueRemove, 5, 8, None, None)?;

        let (ops, data) = log.parts();
        assert_eq!(data, b"keyvaluek\x61x\x01");
        let layout: Vec<_> = ops
            .iter()
            .map(|op| (op.kind, op.state, op.slot, op.key_end, op.value_end))
            .collect();
        assert_eq!(
            layout,
            [
                (OpKind::MapPut, 3, 0, 3, 8),
                (OpKind::MapRemove, 3, 1, 9, 9),
                (OpKind::MapClear, 3, 2, 9, 9),
                (OpKind::ListAppend, 4, 0, 9, 11),
                (OpKind::ValueSet, 5, 7, 11, 12),
                (OpKind::ValueRemove, 5, 8, 12, 12),
            ]
        );
        Ok(())
    }

    #[test]
    fn a_failed_write_leaves_the_log_unchanged() -> Result<()> {
        let mut log = OpLog::default();
        log.push(OpKind::ListAppend, 1, 0, None, Some(&mut bytes(b"ok")))?;
        let mut failing = |data: &mut Vec<u8>| {
            data.extend_from_slice(b"partial");
            Err(Error::new("cannot encode"))
        };
        assert!(
            log.push(
                OpKind::MapPut,
                1,
                0,
                Some(&mut bytes(b"k")),
                Some(&mut failing)
            )
            .is_err()
        );
        let (ops, data) = log.parts();
        assert_eq!(ops.len(), 1);
        assert_eq!(data, b"ok");
        Ok(())
    }
}

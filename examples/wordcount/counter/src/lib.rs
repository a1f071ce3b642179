//! Word count, step 2: counts words.
//!
//! Input records are keyed by word (the tokenizer's output, keyed by the host). For every
//! record, the count of its key goes up by one and the operator emits a record with the same
//! key and the value `word\t<running count>` (UTF-8).

use weir_guest::{
    Emitter, Error, OpenContext, Operator, Record, Result, ValueState, export_operator,
};

struct Counter {
    count: ValueState<u64>,
}

impl Operator for Counter {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        Ok(Self {
            count: ctx.value_state("count")?,
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let word = record.key_str()?.ok_or_else(|| {
            Error::new(format!(
                "the word counter needs records keyed by word, got one without key (value {:?}); \
                 key the stream with key_by before this operator",
                String::from_utf8_lossy(record.value)
            ))
        })?;
        let count = self.count.get()?.unwrap_or(0) + 1;
        self.count.set(&count)?;
        // `word<TAB>count`, written straight into the output batch.
        out.emit_with(record.key, None, |value| {
            value.extend_from_slice(word.as_bytes());
            value.push(b'\t');
            value.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
            Ok(())
        })
    }
}

export_operator!(Counter);

//! {{name}}: a Weir operator. It counts the records of each key and emits, for every record,
//! `key<TAB>count` under the same key.
//!
//! Build it with `weir build`, run it with `weir run job.toml`.

use weir_guest::{
    Emitter, Error, OpenContext, Operator, Record, Result, ValueState, export_operator,
};

struct Counter {
    /// Records seen per key: kept by the host, checkpointed with the job.
    count: ValueState<u64>,
}

impl Operator for Counter {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        Ok(Self {
            count: ctx.value_state("count")?,
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let key = record.key_str()?.ok_or_else(|| {
            Error::new("records need a key: set key_by for this operator in the job file")
        })?;
        let count = self.count.get()?.unwrap_or(0) + 1;
        self.count.set(&count)?;
        out.emit_fmt(record.key, format_args!("{key}\t{count}"))
    }
}

export_operator!(Counter);

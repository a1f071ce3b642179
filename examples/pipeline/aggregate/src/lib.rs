//! Pipeline step 3, in Rust: per page, how often each action happened and how long the
//! page's requests took in total.
//!
//! Input: records keyed by page with the value `action<TAB>user<TAB>ms` (parsed in Python,
//! filtered in C). State per page: a map state `actions` (action -> count) and a value state
//! `ms_total`. For every event the operator emits, keyed by page,
//! `page<TAB>action<TAB>count of that action<TAB>distinct actions<TAB>ms_total`.

use weir_guest::{
    Emitter, Error, MapState, OpenContext, Operator, Record, Result, ValueState, export_operator,
};

struct Aggregate {
    actions: MapState<String, u64>,
    ms_total: ValueState<u64>,
}

impl Operator for Aggregate {
    fn open(ctx: &mut OpenContext) -> Result<Self> {
        Ok(Self {
            actions: ctx.map_state("actions")?,
            ms_total: ctx.value_state("ms_total")?,
        })
    }

    fn process(&mut self, record: &Record<'_>, out: &mut Emitter) -> Result<()> {
        let page = record.key_str()?.ok_or_else(|| {
            Error::new("the aggregator needs records keyed by page: key_by = \"key\"")
        })?;
        let value = record.value_str()?;
        let mut fields = value.split('\t');
        let (Some(action), Some(_user), Some(ms), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(Error::new(format!(
                "expected `action<TAB>user<TAB>ms`, got {value:?}"
            )));
        };
        let ms: u64 = ms
            .parse()
            .map_err(|e| Error::new(format!("bad ms in {value:?}: {e}")))?;
        let action = action.to_owned();
        let count = self.actions.get(&action)?.unwrap_or(0) + 1;
        self.actions.insert(&action, &count)?;
        let distinct = self.actions.keys()?.len();
        let total = self.ms_total.get()?.unwrap_or(0) + ms;
        self.ms_total.set(&total)?;
        out.emit_fmt(
            record.key,
            format_args!("{page}\t{action}\t{count}\t{distinct}\t{total}"),
        )
    }
}

export_operator!(Aggregate);

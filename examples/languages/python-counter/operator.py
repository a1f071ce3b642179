"""Word count, step 2, in Python: the same operator as examples/wordcount/counter.

Input records are keyed by word. For every record, the count of its key goes up by one and
the operator emits a record with the same key and the value `word<TAB><running count>`.
The count is a value state "count", written as JSON text (`5`) and stored by the host as
CBOR, as every language's state is: the Rust, JavaScript and C counters read it too.

It uses the SDK's batch API, the faster one: `process_batch` gets the whole batch as columns,
reads the counts of all its words in one call (`get_by_slot`: a list indexed by
`batch.slots`, the codes of the keys as `pandas.factorize` would give them; `get_all` gives
a dict by key), writes them back in one (`set_all`) and emits all its records in one
(`emit_columns`). The per-record API reads more simply:

    def process(self, record, out):
        count = self.count.get(0) + 1
        self.count.set(count)
        out.emit(record.key, b"%s\\t%d" % (record.key, count))

Build: `weir build examples/languages/python-counter`.
"""

import json

import weir_sdk


class Counter(weir_sdk.Operator):
    def open(self, ctx):
        self.count = ctx.value_state("count")

    def process_batch(self, batch, out):
        words = batch.keys()
        if None in words:
            i = words.index(None)
            value = json.dumps(batch.values()[i].decode(errors="replace"), ensure_ascii=False)
            raise weir_sdk.WeirError(
                f"the word counter needs records keyed by word, got one without key (value "
                f"{value}); key the stream with key_by before this operator",
                record=i,
            )
        # Like the Rust counter, fail on words that are not UTF-8 (ASCII is, checked in C).
        if not b"".join(words).isascii():
            try:
                list(map(bytes.decode, words))
            except UnicodeDecodeError as e:
                i = words.index(e.object)
                raise weir_sdk.WeirError(f"the word counter needs UTF-8 keys: {e}", record=i) from None
        counts = self.count.get_by_slot(0)
        lines = []
        for word, slot in zip(words, batch.slots):
            count = counts[slot] + 1
            counts[slot] = count
            lines.append(b"%s\t%d" % (word, count))
        self.count.set_all(counts)
        out.emit_columns(words, lines)


Processor = weir_sdk.export(Counter)

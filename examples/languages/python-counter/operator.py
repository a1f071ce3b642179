"""Word count, step 2, in Python: the same operator as examples/wordcount/counter.

Input records are keyed by word. For every record, the count of its key goes up by one and
the operator emits a record with the same key and the value `word<TAB><running count>`.
The count is a value state "count" stored as JSON text (`5`).

Build: `weir build examples/languages/python-counter`.
"""

import json

import weir_sdk


class Counter(weir_sdk.Operator):
    def open(self, ctx):
        self.count = ctx.value_state("count")

    def process(self, record, out):
        key = record.key
        if key is None:
            value = json.dumps(record.value.decode(errors="replace"), ensure_ascii=False)
            raise weir_sdk.WeirError(
                f"the word counter needs records keyed by word, got one without key (value "
                f"{value}); key the stream with key_by before this operator"
            )
        word = key.decode()  # the Rust counter fails on keys that are not UTF-8 too
        count = self.count.get(0) + 1
        self.count.set(count)
        out.emit(key, f"{word}\t{count}")


Processor = weir_sdk.export(Counter)

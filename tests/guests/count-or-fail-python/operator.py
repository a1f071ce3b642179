"""A Python counter that fails on one word, for tests/bad_records.rs.

Per keyed record with value `v`, it counts the record in the map state `counts` under "n"
(a map read first, so that the SDK sends the batch's earlier writes to the host: a failure
later in the batch then leaves state writes applied), then fails with a ValueError if `v` is
the configured `word`, else emits `v<TAB>n`. With `on_error = "skip"`, the host must take the
failed call's applied writes back before it processes the batch again without the record.
"""

import weir_sdk


class CountOrFail(weir_sdk.Operator):
    def open(self, ctx):
        self.word = ctx.config["word"]
        self.counts = ctx.map_state("counts")

    def process(self, record, out):
        word = record.value_str()
        n = self.counts.get("n", 0) + 1
        self.counts.put("n", n)
        if word == self.word:
            raise ValueError(f"{word} is the word this operator fails on")
        out.emit(record.key, f"{word}\t{n}")


Processor = weir_sdk.export(CountOrFail)

"""The batch API of the Python SDK, for tests/sdk_state.rs (the same logic as
../batch-tour-js/operator.js; the test states it once more in Rust).

With `config = { role = "split" }`, each input line `KEY NUMBER` becomes a record keyed by KEY
with the value NUMBER (`emit_many` of pairs). Otherwise, for each record, the value state
`sum` of its key goes up by NUMBER and the operator emits `KEY|sum before|sum after`
(`get_all`, `set_all`, `emit_columns` with `str` and `bytes` values). A record whose NUMBER
is 0 leaves its key's sum as it was: a key whose records of the batch are all 0 gets no
write.

It also checks what the SDK promises: `batch.slots` indexes the keys in the order `get_all`
gives them, and `keys()`, `values()` and `records()` agree with the raw columns (the split
reads records without key, with a timestamp; the tour the split's, keyed, without).
"""

import weir_sdk


class Tour(weir_sdk.Operator):
    def open(self, ctx):
        self.split = ctx.config.get("role") == "split"
        if not self.split:
            self.sum = ctx.value_state("sum")

    def process_batch(self, batch, out):
        keys, values = batch.keys(), batch.values()
        self.check(batch, keys, values)
        if self.split:
            out.emit_many([tuple(value.split(b" ", 1)) for value in values])
            return
        self.misuse()
        sums = self.sum.get_all(0)
        order = list(sums)
        lines = []
        for i, (key, value, slot) in enumerate(zip(keys, values, batch.slots)):
            if order[slot] != key:
                raise weir_sdk.WeirError(f"slot {slot} is {order[slot]!r}, not {key!r}")
            before = sums[key]
            number = int(value)
            if number:
                sums[key] = before + number
            line = f"{key.decode()}|{before}|{sums[key]}"
            # `str` and `bytes` values mixed.
            lines.append(line if i % 2 else line.encode())
        self.sum.set_all(sums)
        out.emit_columns(keys, lines)

    def misuse(self):
        """The per-record state calls and keys of another batch are refused, saying why."""
        for call, needs in [
            (lambda: self.sum.get(), "in process_batch, read and write value state"),
            (lambda: self.sum.set_all({b"not-a-key": 1}), "is not a key of this batch"),
            (lambda: self.sum.set_all([0] * 10_000), "one value per key of the batch"),
        ]:
            try:
                call()
            except weir_sdk.WeirError as e:
                assert needs in str(e), str(e)
            else:
                raise AssertionError(f"no error, expected one with {needs!r}")

    @staticmethod
    def check(batch, keys, values):
        data, start = batch.data, 0
        for i, record in enumerate(batch.records()):
            key_end, value_end, flags = batch.key_ends[i], batch.value_ends[i], batch.flags[i]
            key = data[start:key_end] if flags & 1 else None
            assert record.key == keys[i] == key, (i, record.key, keys[i])
            assert record.value == values[i] == data[key_end:value_end], (i, record.value)
            assert record.timestamp == (batch.timestamps[i] if flags & 2 else None), i
            start = value_end
        assert len(batch) == len(keys) == len(values) == len(batch.slots)


Processor = weir_sdk.export(Tour)

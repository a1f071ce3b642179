"""The batch API of the Python SDK, for tests/sdk_state.rs (the same logic as
../batch-tour-js/operator.js; the test states it once more in Rust).

With `config = { role = "split" }`, each input line `KEY NUMBER` becomes a record keyed by KEY
with the value NUMBER (`emit_many` of pairs). Otherwise, for each record, the value state
`sum` of its key goes up by NUMBER and the operator emits `KEY|sum before|sum after`
(`get_all`, `set_all`, `emit_columns` with `str` and `bytes` values). A record whose NUMBER
is 0 leaves its key's sum as it was: a key whose records of the batch are all 0 gets no
write.

The other state kinds, through `batch.focus(slot)` and `MapState.get_many`: the map state
`seen` counts, per key, the records of each NUMBER (read for the whole batch with one
`get_many`, written back per key); the list state `history` gets every NUMBER appended (its
lengths read for the whole batch with one `get_many`), and a record whose NUMBER is 0 reads
the list back; every record registers the event-time timer
`END` (tag 7) of its key, so each key's timer fires once, at the end of input, and emits
`KEY|end|final sum`. So a record's line is `KEY|sum before|sum after|records of this NUMBER
before|length of the history` (`-` for the last unless NUMBER is 0).

It also checks what the SDK promises: `batch.slots` indexes the keys in the order `get_all`
gives them, and `keys()`, `values()` and `records()` agree with the raw columns (the split
reads records without key, with a timestamp; the tour the split's, keyed, without).
"""

import weir_sdk

#: When each key's timer is due: past every record, so it fires at the end of input.
END = 10**12
TAG = 7


class Tour(weir_sdk.Operator):
    def open(self, ctx):
        self.split = ctx.config.get("role") == "split"
        if not self.split:
            self.sum = ctx.value_state("sum")
            self.seen = ctx.map_state("seen")
            self.history = ctx.list_state("history")
            self.timers = ctx.timers()

    def process_batch(self, batch, out):
        keys, values = batch.keys(), batch.values()
        self.check(batch, keys, values)
        if self.split:
            out.emit_many([tuple(value.split(b" ", 1)) for value in values])
            return
        self.misuse(batch)
        sums = self.sum.get_all(0)
        order = list(sums)
        numbers = [int(value) for value in values]
        prior = self.seen.get_many(batch.slots, numbers, 0)
        lengths = [len(items) for items in self.history.get_many(list(range(len(order))))]
        counts = {}
        lines = []
        for i, (key, number, slot) in enumerate(zip(keys, numbers, batch.slots)):
            if order[slot] != key:
                raise weir_sdk.WeirError(f"slot {slot} is {order[slot]!r}, not {key!r}")
            before = sums[key]
            if number:
                sums[key] = before + number
            seen = counts.get((slot, number), prior[i])
            counts[slot, number] = seen + 1
            batch.focus(slot)
            self.history.append(number)
            lengths[slot] += 1
            self.timers.register_event_time(END, TAG)
            history = "-"
            if number == 0:
                history = lengths[slot]
                assert len(self.history.get()) == history, (key, self.history.get(), history)
                # The map's writes go out after the loop: `get` still reads what was stored.
                assert self.seen.get(number, 0) == prior[i], (key, self.seen.get(number), prior[i])
            line = f"{key.decode()}|{before}|{sums[key]}|{seen}|{history}"
            # `str` and `bytes` values mixed.
            lines.append(line if i % 2 else line.encode())
        for (slot, number), seen in counts.items():
            batch.focus(slot)
            self.seen.put(number, seen)
        self.sum.set_all(sums)
        out.emit_columns(keys, lines)

    def on_timer(self, timer, out):
        if (timer.tag, timer.timestamp, timer.domain) != (TAG, END, "event"):
            raise weir_sdk.WeirError(f"unexpected timer {timer.tag} at {timer.timestamp}")
        out.emit(timer.key, f"{timer.key.decode()}|end|{self.sum.get(0)}")

    def misuse(self, batch):
        """Per-key calls before `focus`, slots and keys not of this batch are refused, saying
        why."""
        for call, needs in [
            (lambda: self.sum.get(), "first choose the key with batch.focus(slot)"),
            (lambda: self.seen.put(1, 1), "first choose the key with batch.focus(slot)"),
            (lambda: self.timers.register_event_time(END, TAG), "batch.focus(slot)"),
            (lambda: batch.focus(10_000), "a slot is an int of batch.slots"),
            (lambda: self.seen.get_many([0], []), "one key per slot"),
            (lambda: self.seen.get_many([10_000], [1]), "key slot 10000 does not exist"),
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

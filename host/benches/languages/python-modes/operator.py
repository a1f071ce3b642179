"""The per-record cost of a Python operator, layer by layer, for `benches/languages.rs`.

The job file's (or the benchmark's) config `{"mode": M}` picks what each `process` does:

- `empty`: the bare binding, no SDK: returns an empty batch. What the interpreter and the
  bindings cost to lift a batch and call into Python.
- `echo`: the bare binding: returns the input batch as it came. Adds lowering it back.
- `sdk-record`: the SDK's per-record API passing every record through (`process`, `emit`).
- `sdk-batch`: the SDK's batch API passing every record through (`process_batch`,
  `emit_columns`).
- `count-record`: the word counter with the per-record API (the batch one is
  `examples/languages/python-counter`).
"""

import json

import weir_sdk
from componentize_py_types import Err
from wit_world.imports import types


class PassRecords(weir_sdk.Operator):
    def process(self, record, out):
        out.emit(record.key, record.value)


class PassBatch(weir_sdk.Operator):
    def process_batch(self, batch, out):
        out.emit_columns(batch.keys(), batch.values())


class CountRecords(weir_sdk.Operator):
    def open(self, ctx):
        self.count = ctx.value_state("count")

    def process(self, record, out):
        key = record.key
        count = self.count.get(0) + 1
        self.count.set(count)
        out.emit(key, b"%s\t%d" % (key, count))


SDK_MODES = {
    "sdk-record": weir_sdk.export(PassRecords),
    "sdk-batch": weir_sdk.export(PassBatch),
    "count-record": weir_sdk.export(CountRecords),
}
EMPTY = types.Batch(b"", b"", b"", b"", b"")


class Processor:
    mode = None
    inner = None

    def open(self, ctx):
        mode = json.loads(ctx.config).get("mode")
        if mode not in ("empty", "echo", *SDK_MODES):
            raise Err(f"unknown mode {mode!r}")
        Processor.mode = mode
        if mode in SDK_MODES:
            Processor.inner = SDK_MODES[mode]()
            Processor.inner.open(ctx)

    def process(self, batch, key_slots):
        mode = Processor.mode
        if mode == "empty":
            return EMPTY
        if mode == "echo":
            return batch
        return Processor.inner.process(batch, key_slots)

    def on_timers(self, timers):
        return EMPTY

    def close(self):
        if Processor.inner is not None:
            return Processor.inner.close()
        return EMPTY

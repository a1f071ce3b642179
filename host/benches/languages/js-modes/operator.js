// The per-record cost of a JavaScript operator, layer by layer, for `benches/languages.rs`.
//
// The config `{"mode": M}` picks what each `process` does:
// - `empty`: the bare binding, no SDK: returns an empty batch. What the engine and the
//   bindings cost to lift a batch and call into JavaScript.
// - `echo`: the bare binding: returns the input batch as it came. Adds lowering it back.
// - `sdk-record`: the SDK's per-record API passing every record through (`process`, `emit`).
// - `sdk-batch`: the SDK's batch API passing every record through (`processBatch`,
//   `emitMany`).
// - `count-record`: the word counter with the per-record API (the batch one is
//   `examples/languages/js-counter`).

import { Operator, exportOperator } from "./weir.js";

class PassRecords extends Operator {
  process(record, out) {
    out.emit(record.key, record.value);
  }
}

class PassBatch extends Operator {
  processBatch(batch, out) {
    out.emitMany(batch.keys(), batch.values());
  }
}

class CountRecords extends Operator {
  open(ctx) {
    this.count = ctx.valueState("count");
  }

  process(record, out) {
    const key = record.key;
    const count = this.count.get(0) + 1;
    this.count.set(count);
    out.begin(key);
    out.write(key);
    out.write("\t");
    out.writeUint(count);
    out.end();
  }
}

const SDK_MODES = {
  "sdk-record": exportOperator(PassRecords),
  "sdk-batch": exportOperator(PassBatch),
  "count-record": exportOperator(CountRecords),
};

const NONE = new Uint8Array(0);
const EMPTY = { data: NONE, keyEnds: NONE, valueEnds: NONE, flags: NONE, timestamps: NONE };

let mode = null;
let inner = null;

export const processor = {
  open(ctx) {
    mode = JSON.parse(ctx.config).mode;
    if (mode === "empty" || mode === "echo") return;
    inner = SDK_MODES[mode];
    if (inner === undefined) throw `unknown mode ${JSON.stringify(mode)}`;
    inner.open(ctx);
  },

  process(batch, keySlots) {
    if (mode === "empty") return EMPTY;
    if (mode === "echo") return batch;
    return inner.process(batch, keySlots);
  },

  onTimers(timers) {
    return EMPTY;
  },

  close() {
    return inner === null ? EMPTY : inner.close();
  },
};

// A JavaScript operator that fails on demand, for tests/guest_failures.rs.
//
// Its behaviour is chosen by the config `{ mode = "...", word = "..." }`. It passes every
// record through, except a record whose value is `word`, on which, by mode:
//
// - `throw-in-helper`: the helper function `checkWord` throws an Error;
// - `emit-object`: it emits an object as the value;
// - `emit-number`: it emits a number as the value;
// - `console`: it writes to every `console` method, then passes the record through;
// - `passthrough` (the default): nothing special.
//
// And in mode `bad-batch`, `process` bypasses the SDK and returns a malformed batch: record 0
// says its key ends at byte 3 and its value at byte 0, in a batch of no bytes.

import { Operator, exportOperator } from "./weir.js";

const MODES = [
  "passthrough",
  "throw-in-helper",
  "emit-object",
  "emit-number",
  "console",
  "bad-batch",
];

function checkWord(word) {
  throw new Error(`the word ${JSON.stringify(word)} is not welcome here`);
}

class Failures extends Operator {
  open(ctx) {
    this.mode = ctx.config.mode ?? "passthrough";
    this.word = ctx.config.word;
    if (!MODES.includes(this.mode)) {
      throw new Error(`unknown mode ${JSON.stringify(this.mode)}; expected one of ${MODES.join(", ")}`);
    }
  }

  process(record, out) {
    if (record.valueStr() === this.word) {
      if (this.mode === "throw-in-helper") checkWord(this.word);
      if (this.mode === "emit-object") out.emit(record.key, { word: this.word });
      if (this.mode === "emit-number") out.emit(record.key, 42);
      if (this.mode === "console") {
        console.log("console.log saw", this.word, { n: 1 });
        console.info("console.info saw", this.word);
        console.warn("console.warn saw", this.word);
        console.error("console.error saw", new Error("an error"));
        console.debug("console.debug saw", 42);
      }
    }
    out.emit(record.key, record.value);
  }
}

const sdk = exportOperator(Failures);
let badBatch = false;

export const processor = {
  open(ctx) {
    badBatch = JSON.parse(ctx.config).mode === "bad-batch";
    return sdk.open(ctx);
  },

  process(batch, keySlots) {
    if (!badBatch) return sdk.process(batch, keySlots);
    // The number columns are little-endian bytes (`u32s`, `s64s`).
    return {
      data: new Uint8Array(0),
      keyEnds: Uint8Array.of(3, 0, 0, 0),
      valueEnds: Uint8Array.of(0, 0, 0, 0),
      flags: Uint8Array.of(1),
      timestamps: new Uint8Array(8),
    };
  },

  close() {
    return sdk.close();
  },
};

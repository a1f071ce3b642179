// {{name}}: a Weir operator. It counts the records of each key and emits, for every record,
// `key<TAB>count` under the same key.
//
// Build it with `weir build`, run it with `weir run job.toml`. `weir build` stages the SDK,
// weir.js, beside this file (its source: guest-sdk-js/weir.js in the Weir repository).

import { Operator, WeirError, exportOperator } from "./weir.js";

class Counter extends Operator {
  open(ctx) {
    // Records seen per key: kept by the host, checkpointed with the job.
    this.count = ctx.valueState("count");
  }

  process(record, out) {
    if (record.key === null) {
      throw new WeirError("records need a key: set key_by for this operator in the job file");
    }
    const count = this.count.get(0) + 1;
    this.count.set(count);
    out.emit(record.key, `${record.keyStr()}\t${count}`);
  }
}

// The object exported as weir:operator/processor.
export const processor = exportOperator(Counter);

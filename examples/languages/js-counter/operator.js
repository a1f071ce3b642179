// Word count, step 2, in JavaScript: the same operator as examples/wordcount/counter.
//
// Input records are keyed by word. For every record, the count of its key goes up by one and
// the operator emits a record with the same key and the value `word<TAB><running count>`.
// The count is a value state "count" stored as JSON text (`5`).
//
// Build: `weir build examples/languages/js-counter` (which stages the SDK as ./weir.js).

import { Operator, WeirError, exportOperator, isUtf8 } from "./weir.js";

class Counter extends Operator {
  open(ctx) {
    this.count = ctx.valueState("count");
  }

  process(record, out) {
    const key = record.key;
    if (key === null) {
      throw new WeirError(
        `the word counter needs records keyed by word, got one without key (value ${JSON.stringify(
          record.valueStr(),
        )}); key the stream with key_by before this operator`,
      );
    }
    if (!isUtf8(key)) throw new WeirError("the word counter needs UTF-8 keys"); // like the Rust counter
    const count = this.count.get(0) + 1;
    this.count.set(count);
    // `word<TAB>count`, written straight into the output batch (`out.emit(key, str)` works
    // too, at the price of a string per record).
    out.begin(key);
    out.write(key);
    out.write("\t");
    out.writeUint(count);
    out.end();
  }
}

export const processor = exportOperator(Counter);

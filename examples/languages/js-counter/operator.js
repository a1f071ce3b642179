// Word count, step 2, in JavaScript: the same operator as examples/wordcount/counter.
//
// Input records are keyed by word. For every record, the count of its key goes up by one and
// the operator emits a record with the same key and the value `word<TAB><running count>`.
// The count is a value state "count", written as JSON text (`5`) and stored by the host as
// CBOR, as every language's state is: the Rust, Python and JavaScript counters read it too.
//
// It uses the SDK's batch API, the faster one: `processBatch` gets the whole batch as typed
// arrays, reads the counts of all its words in one call (`getAll`, an array indexed by
// `batch.slots`), writes them back in one (`setAll`), and builds each output record from the
// input's bytes without making a view or a string (`beginKeyOf`, `writeKeyOf`). The
// per-record API reads more simply:
//
//   process(record, out) {
//     const count = this.count.get(0) + 1;
//     this.count.set(count);
//     out.emit(record.key, `${record.keyStr()}\t${count}`);
//   }
//
// Build: `weir build examples/languages/js-counter` (which stages the SDK as ./weir.js).

import { HAS_KEY, Operator, WeirError, exportOperator, isUtf8 } from "./weir.js";

class Counter extends Operator {
  open(ctx) {
    this.count = ctx.valueState("count");
  }

  processBatch(batch, out) {
    const counts = this.count.getAll(0);
    const slots = batch.slots;
    for (let i = 0; i < batch.length; i++) {
      if ((batch.flags[i] & HAS_KEY) === 0) {
        throw new WeirError(
          `the word counter needs records keyed by word, got one without key (value ${JSON.stringify(
            batch.valueStr(i),
          )}); key the stream with key_by before this operator`,
          { record: i },
        );
      }
      const slot = slots[i];
      const count = counts[slot] + 1;
      // Like the Rust counter, fail on keys that are not UTF-8: a word counted before was
      // checked then.
      if (count === 1 && !isUtf8(batch.key(i))) {
        throw new WeirError("the word counter needs UTF-8 keys", { record: i });
      }
      counts[slot] = count;
      // `word<TAB>count` under the key `word`, copied straight from the input batch into
      // the output batch.
      out.beginKeyOf(batch, i);
      out.writeKeyOf(batch, i);
      out.write("\t");
      out.writeUint(count);
      out.end();
    }
    this.count.setAll(counts);
  }
}

export const processor = exportOperator(Counter);

// Pipeline step 4, in JavaScript: the aggregates as readable lines.
//
// Input: `page<TAB>action<TAB>count<TAB>distinct actions<TAB>ms_total` from the Rust
// aggregator. Output, unkeyed: `page=/docs action=view count=3 actions=2 total_ms=360`.

import { Operator, WeirError, exportOperator } from "./weir.js";

class Format extends Operator {
  process(record, out) {
    const fields = record.valueStr().split("\t");
    if (fields.length !== 5) {
      throw new WeirError(`expected five tab-separated fields, got ${JSON.stringify(record.valueStr())}`);
    }
    const [page, action, count, distinct, total] = fields;
    out.emit(null, `page=${page} action=${action} count=${count} actions=${distinct} total_ms=${total}`);
  }
}

export const processor = exportOperator(Format);

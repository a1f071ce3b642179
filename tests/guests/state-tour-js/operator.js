// Every state call of the JavaScript SDK, for tests/sdk_state.rs: the same logic as
// ../state-tour-python/operator.py, whose docstring describes it.

import { Operator, exportOperator } from "./weir.js";

class Tour extends Operator {
  open(ctx) {
    this.split = ctx.config.role === "split";
    if (!this.split) {
      this.last = ctx.valueState("last");
      this.seen = ctx.mapState("seen");
      this.history = ctx.listState("history");
    }
  }

  process(record, out) {
    if (this.split) {
      const line = record.valueStr();
      const space = line.indexOf(" ");
      out.emit(line.slice(0, space), line.slice(space + 1));
      return;
    }
    const v = record.valueStr();
    const prev = this.last.get("-");
    if (v === "del") {
      this.last.remove();
    } else {
      this.last.set(/^[0-9]+$/.test(v) ? Number(v) : v);
    }
    let target = v;
    if (v === "forget") {
      this.seen.clear();
    } else if (v.startsWith("-")) {
      target = v.slice(1);
      this.seen.remove(target);
    } else {
      this.seen.put(v, this.seen.get(v, 0) + 1);
    }
    if (v === "reset") {
      this.history.clear();
    } else {
      this.history.push(v);
    }
    const keys = this.seen.keys().join(",");
    out.emit(
      record.key,
      `${record.keyStr()}|${prev}|${this.seen.get(target, 0)}|${this.history.get().length}|${keys}|${this.seen.size}`,
    );
  }
}

export const processor = exportOperator(Tour);

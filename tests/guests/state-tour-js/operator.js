// Every state call of the JavaScript SDK, for tests/sdk_state.rs: the same logic as
// ../state-tour-python/operator.py, whose docstring describes it (the counters of
// `role = "count-v1"` and `"count-v2"`, and their map-state and list-state forms, too).

import { Operator, exportOperator, keySlot } from "./weir.js";

function countFromV1(version, old) {
  if (version !== 1) throw new Error(`no migration from version ${version}`);
  return { total: old.count, last_seen: "" };
}

/** The count of `map-count-v1` and `map-count-v2`: a map state's entry `n`, read and written
 * as the value state of `count-v1` and `count-v2` is. */
class MapEntry {
  constructor(map) {
    this.map = map;
  }

  get(dflt) {
    // Through `getMany` (for the record's own slot), so that a versioned map's batch read
    // migrates what it reads as `get` does.
    return this.map.getMany([keySlot()], ["n"], dflt)[0];
  }

  set(value) {
    this.map.put("n", value);
  }
}

/** The count of `list-count-v1` and `list-count-v2`: the one item of a list state. */
class ListItem {
  constructor(list) {
    this.list = list;
  }

  get(dflt) {
    // Through `getMany`, as `MapEntry.get`.
    const items = this.list.getMany([keySlot()])[0];
    return items.length > 0 ? items[items.length - 1] : dflt;
  }

  set(value) {
    this.list.clear();
    this.list.push(value);
  }
}

class Tour extends Operator {
  open(ctx) {
    const role = ctx.config.role;
    this.split = role === "split";
    const counter = /^(map-|list-)?(count-v[12])$/.exec(role ?? "");
    this.counter = counter ? counter[2] : null;
    const versioned = { version: 2, migrate: countFromV1 };
    if (role === "count-v1") {
      this.counts = ctx.valueState("count");
    } else if (role === "count-v2") {
      this.counts = ctx.valueState("count", versioned);
    } else if (role === "map-count-v1") {
      this.counts = new MapEntry(ctx.mapState("counts"));
    } else if (role === "map-count-v2") {
      this.counts = new MapEntry(ctx.mapState("counts", versioned));
    } else if (role === "list-count-v1") {
      this.counts = new ListItem(ctx.listState("counts"));
    } else if (role === "list-count-v2") {
      this.counts = new ListItem(ctx.listState("counts", versioned));
    } else if (!this.split) {
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
    if (this.counter === "count-v1") {
      const n = this.counts.get({ count: 0 }).count + 1;
      this.counts.set({ count: n });
      out.emit(record.key, `${record.keyStr()}\t${n}`);
      return;
    }
    if (this.counter === "count-v2") {
      const n = this.counts.get({ total: 0 }).total + 1;
      const v = record.valueStr();
      this.counts.set({ total: n, last_seen: v });
      out.emit(record.key, `${record.keyStr()}\t${n}\t${v}`);
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

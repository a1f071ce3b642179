// The operator's side of the contract: the `Operator` base class, and `exportOperator`, which
// makes the object a module exports as `processor`.

import { OpenContext } from "./context.js";
import { Emitter } from "./emitter.js";
import { WeirError, failure, report } from "./errors.js";
import { rt, runBatch, runTimers } from "./runtime.js";

/** Base class of operators. The SDK creates one instance per subtask (without arguments),
 * then calls `open` once, `process` for every record, `onTimer` for every timer that fires,
 * `close` at the end of input. */
export class Operator {
  open(ctx) {}

  process(record, out) {
    throw new WeirError("an operator must implement process(record, out) or processBatch(batch, out)");
  }

  // `processBatch(batch, out)`, if an operator defines it, is called once per batch instead of
  // `process` once per record: `batch` is a `Batch` (columns), the value state of all its keys
  // is read and written with `ValueState.getAll` and `setAll`, and `out.emitMany` emits many
  // records in one call. Map and list state and timers act on the key chosen with
  // `batch.focus(slot)`, and `MapState.getMany` reads the maps of many keys in one host call.

  /** Handles a `Timer` that fired; state acts on `timer.key` here. */
  onTimer(timer, out) {
    throw new WeirError(
      `a timer fired (tag ${timer.tag}, at ${timer.timestamp}) but the operator does not implement onTimer(timer, out)`,
    );
  }

  close(out) {}
}

/** The `processor` export driving instances of `OperatorClass`:
 * `export const processor = exportOperator(MyOperator);`. Errors are thrown as what the WIT
 * `result` holds (a string from `open`, a `failure` from `process` and `close`), which the
 * bindings return as its error. */
export function exportOperator(OperatorClass) {
  let operator = null;
  // Whether the operator defines `processBatch`.
  let batchApi = false;
  const out = new Emitter();
  return {
    open(ctx) {
      if (operator !== null) throw "open called on an operator instance that is already open";
      rt.inOpen = true;
      try {
        const instance = new OperatorClass();
        instance.open(new OpenContext(ctx));
        operator = instance;
        batchApi = typeof instance.processBatch === "function";
      } catch (e) {
        throw report(e);
      } finally {
        rt.inOpen = false;
      }
    },

    process(batch, keySlots) {
      if (operator === null) {
        throw failure("the operator is not open: process called before open or after close");
      }
      return runBatch(operator, batchApi, out, batch, keySlots);
    },

    onTimers(timers) {
      if (operator === null) {
        throw failure("the operator is not open: onTimers called before open or after close");
      }
      return runTimers(operator, out, timers);
    },

    close() {
      if (operator === null) {
        throw failure("the operator is not open: close called before open or after close");
      }
      const closing = operator;
      operator = null;
      try {
        closing.close(out);
        return out._take();
      } catch (e) {
        out._reset();
        throw failure(e);
      }
    },
  };
}

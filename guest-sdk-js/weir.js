// Write Weir stream operators in JavaScript, compiled to components with
// `jco componentize --backend qjs --backend-qjs-disable-async` (QuickJS).
//
// An operator is a subclass of `Operator`: `open(ctx)` reads the configuration and declares
// keyed state, `process(record, out)` turns each input `Record` into any number of output
// records written to `out` (an `Emitter`), and `close(out)` may emit final records at the end
// of input. An operator may implement `processBatch(batch, out)` instead, which gets the whole
// `Batch` as typed arrays, reads and writes the value state of all its keys in one call each
// (`ValueState.getAll`, `setAll`, arrays indexed by `batch.slots`) and emits many records
// (`emitMany`, or `beginKeyOf`/`writeKeyOf` that copy an input record's bytes): the faster
// way. `exportOperator(Class)` makes the object the module exports as `processor`
// (the `weir:operator/processor` interface). Put the operator in `operator.js` and build it
// with `weir build`, which stages this file (the one of the `weir` binary) beside it as
// `weir.js`; `weir new --lang js NAME` starts a project:
//
//     import { Operator, exportOperator } from "./weir.js";
//
//     class Counter extends Operator {
//       open(ctx) { this.count = ctx.valueState("count"); }
//       process(record, out) {
//         const n = (this.count.get() ?? 0) + 1;
//         this.count.set(n);
//         out.emit(record.key, `${record.keyStr()}\t${n}`);
//       }
//     }
//
//     export const processor = exportOperator(Counter);
//
// Like the Rust SDK, this one is built around the cost of the component boundary:
//
// - Records arrive as one flat batch plus one key slot per record; `process` sees them one at
//   a time through a single reused `Record` whose `key` and `value` are `Uint8Array` views of
//   the batch, made when read (each read makes a new view: keep it in a variable; copy it
//   with `.slice()` to keep it beyond the call). `keyStr()`/`valueStr()` decode straight
//   from the batch.
// - A `ValueState` reads the values of *every* key slot of the batch in one `read-values`
//   call, the first time it is read in a batch, and decodes each slot on its first use.
// - All writes of a batch are buffered and reach the host in one `apply` call at the end of
//   the batch (a value state sends one write per key it changed, whatever the number of
//   `set`s). A map or list read first sends the pending writes (read your writes).
// - Output records are appended to one flat, reused byte buffer, and their offsets, flags and
//   timestamps to reused typed arrays.
//
// Where the time goes (QuickJS compiled to WebAssembly, no JIT): the bindings copy a
// `list<u8>` (a `Uint8Array`) across the boundary in one piece, but a plain array element by
// element; the WIT carries every number column as little-endian bytes (`u32s`, `s64s`), which
// the SDK views as a `Uint32Array` without a copy; and making any object (a view, an object literal, a
// string) costs far more than reading or writing a number. So the SDK hands the host typed
// arrays (the `apply` log is one: five u32 words per operation), and keeps the per-record
// path to a few property writes and one call.
//
// State values, map keys, map values and list items cross to the host as JSON text (UTF-8),
// which the host stores as CBOR, the one encoding of state in every language: a count of 5
// written here reads as 5 in a Rust, Python or C operator. A `Uint8Array` crosses as
// `{"$bytes": "<base64>"}` and is stored as CBOR bytes (docs/languages.md).
//
// `Emitter.emit` takes keys and values as strings (written as UTF-8), `Uint8Array`s (or other
// typed array views) or `ArrayBuffer`s, and throws a `TypeError` at the call for anything
// else; `emitJson` writes any JSON value.
//
// An exception thrown by `open`, `process` or `close` fails the job with its message and its
// `stack` (without this SDK's frames), where QuickJS gives one. From `process`, the host also
// learns which record of the batch was being processed. The writes of the failed batch are
// dropped and so are the records it emitted; the host may roll the batch's state back and
// process it again without the failing record, so an operator keeps nothing of a failed
// batch in its own fields either.
//
// QuickJS has no TextEncoder/TextDecoder: `utf8Encode`/`utf8Decode` (weir/bytes.js) do the work.
// Timestamps (s64) are JS numbers (exact up to 2^53), read from their two 32-bit halves. StarlingMonkey
// (`jco componentize --bundle -d http fetch-event`, no --backend) works too but runs slower.
//
// The SDK is one concept per file under `weir/`; this file gathers what operators import.

export { WeirError } from "./weir/errors.js";
export { isUtf8, utf8Decode, utf8Encode } from "./weir/bytes.js";
export { countDroppedLate, log } from "./weir/log.js";
export { Batch, HAS_KEY, HAS_TIMESTAMP, NO_SLOT, Record } from "./weir/records.js";
export { Emitter } from "./weir/emitter.js";
export { ListState, MapState, Timers, ValueState, batchRows, keySlot } from "./weir/runtime.js";
export { s64At } from "./weir/records.js";
export { OpenContext } from "./weir/context.js";
export { Timer } from "./weir/timer.js";
export { Operator, exportOperator } from "./weir/operator.js";

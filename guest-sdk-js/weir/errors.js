// WeirError, and what the host shows of anything thrown: its message and its stack
// without the SDK's frames.

/** An error the SDK reports, or an operator throws. From `processBatch`, `{ record: i }` tells
 * the host that record `i` of the batch failed: `new WeirError(message, { record: i })`. */
export class WeirError extends Error {
  constructor(message, options) {
    super(message, options);
    this.record = options?.record ?? null;
  }
}

/** The index of the record that failed: the loop's `i`, else the one a `WeirError` names. */
export function failedRecord(e, i) {
  if (i >= 0) return i;
  return e instanceof WeirError && Number.isInteger(e.record) ? e.record : null;
}

/** The message of anything thrown, including host errors (which carry a `payload`). */
export function message(e) {
  if (e instanceof WeirError) return e.message;
  if (e && typeof e === "object") {
    if (typeof e.payload === "string") return e.payload;
    if (e.message !== undefined) return `${e.name || "Error"}: ${e.message}`;
  }
  return String(e);
}

/** What the host shows of anything thrown: its message, then its stack (QuickJS gives one to
 * errors) without the frames of this file, with files named as in the project (QuickJS
 * writes `/operator.js`). */
export function report(e) {
  const text = message(e);
  const stack = e !== null && typeof e === "object" && typeof e.stack === "string" ? e.stack : "";
  const frames = stack
    .split("\n")
    .filter((line) => line.trim() !== "" && !SDK_FRAME.test(line))
    .map((line) => line.replace("(/", "("))
    .join("\n");
  return frames === "" ? text : `${text}\n${frames}`;
}

/** A stack line of the SDK's files (staged as `weir.js` and `weir/*.js` beside the operator);
 * the windows library's frames are part of the operator's story and stay. */
const SDK_FRAME = /[(\s/]weir(\/\w+)?\.js:\d/;

/** The WIT `failure` of `process` or `close`: what the bindings return when it is thrown.
 * `record` is the index of the record being processed, or null. */
export function failure(e, record = null) {
  return { message: report(e), record };
}

/** Calls a host function, turning its error into a WeirError with `what` as context. */
export function host(what, f) {
  try {
    return f();
  } catch (e) {
    throw new WeirError(`${what}: ${message(e)}`);
  }
}

// The guest log (`log`, and `console` where QuickJS has none), and the counts an operator
// reports to the host (records dropped as too late).

import * as logApi from "weir:operator/log@0.6.0";
import * as metricsApi from "weir:operator/metrics@0.6.0";

// Logging (each call is one crossing to the host: keep it out of per-record loops)

export const log = {
  trace: (m) => logApi.log("trace", String(m)),
  debug: (m) => logApi.log("debug", String(m)),
  info: (m) => logApi.log("info", String(m)),
  warn: (m) => logApi.log("warn", String(m)),
  error: (m) => logApi.log("error", String(m)),
};

/** One console argument as text: strings as they are, errors with their stack, other values
 * as JSON where they have a JSON form. */
function consoleText(value) {
  if (typeof value === "string") return value;
  if (value instanceof Error) return value.stack ? `${value}\n${value.stack}` : String(value);
  if (typeof value === "object" && value !== null) {
    try {
      return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? String(v) : v));
    } catch {
      return String(value);
    }
  }
  return String(value);
}

/** A console method that writes one guest log line at `level`. */
function consoleMethod(level) {
  return (...args) => logApi.log(level, args.map(consoleText).join(" "));
}

// QuickJS has no `console`: the SDK gives it one that writes to the guest log, at the level
// each method names (`log` at info), so that operators log as anywhere else.
if (typeof globalThis.console === "undefined") {
  globalThis.console = {
    log: consoleMethod("info"),
    info: consoleMethod("info"),
    warn: consoleMethod("warn"),
    error: consoleMethod("error"),
    debug: consoleMethod("debug"),
    trace: consoleMethod("trace"),
  };
}

/** Counts `records` dropped as too late for event time into the host's per-operator count
 * (the run summary, `/metrics`, the console). The windows library calls it. */
export function countDroppedLate(records) {
  metricsApi.countDroppedLate(records);
}

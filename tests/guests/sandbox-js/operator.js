// A JavaScript operator that reaches for everything a sandbox grants or refuses, for
// tests/sandbox.rs.
//
// For each record it writes to every `console` method and logs through the SDK, and emits
// one record per check, `check=result`:
//
// - `wall_clock=SECONDS` (`Date.now()`), `date=YEAR` (`new Date()`), `monotonic=ok`
//   (`performance.now()` does not go back);
// - `random=A,B` (two draws of `Math.random()`);
// - `file=`, `env=`, `socket=`: `refused: ErrorName` when reading `/etc/passwd`, the
//   variable `WEIR_PROBE_SECRET` and connecting to `127.0.0.1:PORT` (config `port`) throw,
//   or what was read if they do not. QuickJS has no file, process or network API: each
//   attempt is what Node.js code would write, and throws.

import { Operator, exportOperator, log } from "./weir.js";

function refused(attempt) {
  try {
    return `granted: ${JSON.stringify(attempt())}`;
  } catch (e) {
    return `refused: ${e.name}`;
  }
}

class Probe extends Operator {
  open(ctx) {
    this.port = ctx.config.port ?? 9;
  }

  process(record, out) {
    console.log("probe: console.log");
    console.info("probe: console.info");
    console.warn("probe: console.warn");
    console.error("probe: console.error");
    console.debug("probe: console.debug");
    log.info("probe: weir log.info");

    const before = performance.now();
    out.emit(record.key, `wall_clock=${Math.floor(Date.now() / 1000)}`);
    out.emit(record.key, `date=${new Date().getFullYear()}`);
    out.emit(record.key, `monotonic=${performance.now() >= before ? "ok" : "went back"}`);
    out.emit(record.key, `random=${Math.random()},${Math.random()}`);

    out.emit(record.key, `file=${refused(() => require("fs").readFileSync("/etc/passwd", "utf8"))}`);
    out.emit(record.key, `env=${refused(() => process.env.WEIR_PROBE_SECRET)}`);
    out.emit(
      record.key,
      `socket=${refused(() => require("net").connect(this.port, "127.0.0.1"))}`,
    );
  }
}

export const processor = exportOperator(Probe);

// Per-page click counts in tumbling event-time windows, in JavaScript (for tests/windows.rs):
// the same operator as examples/windows/pages (Rust), over the JavaScript SDK's windows
// library, so that both are held to one expectation. Config: `size_ms`, `allowed_lateness_ms`.

import { Operator, exportOperator } from "./weir.js";
import * as windows from "./windows.js";

class PageCounts extends Operator {
  open(ctx) {
    this.windows = windows.tumbling(ctx, "per-page", {
      sizeMs: ctx.config.size_ms ?? 60_000,
      allowedLatenessMs: ctx.config.allowed_lateness_ms ?? 0,
      aggregate: windows.count(),
      onFire: (key, start, end, clicks, out) =>
        out.emitJson(key, { page: windows.keyText(key), start, end, clicks }),
    });
  }

  process(record, out) {
    this.windows.add(record, out);
  }

  onTimer(timer, out) {
    if (!this.windows.onTimer(timer, out)) throw new Error(`not a window timer: ${timer.tag}`);
  }
}

export const processor = exportOperator(PageCounts);

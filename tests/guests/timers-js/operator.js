// Processing-time timers, in JavaScript (for tests/windows.rs). A record whose JSON value has
// `"v":"remind"` registers, once per key, a processing-time timer `delay_ms` (config) from now,
// tagged 7; when it fires, the operator emits `<key> fired <domain> <tag>`. Other records
// pass silently. The key's "reminded" flag keeps a key from registering twice.

import { Operator, exportOperator } from "./weir.js";

class Reminders extends Operator {
  open(ctx) {
    this.delay = ctx.config.delay_ms;
    this.timers = ctx.timers();
    this.reminded = ctx.valueState("reminded");
  }

  process(record, out) {
    if (!record.valueStr().endsWith('"v":"remind"}') || this.reminded.get() !== undefined) return;
    this.reminded.set(true);
    this.timers.registerProcessingTime(this.timers.processingTime() + this.delay, 7);
  }

  onTimer(timer, out) {
    out.emit(timer.key, `${timer.keyStr()} fired ${timer.domain} ${timer.tag}`);
  }
}

export const processor = exportOperator(Reminders);

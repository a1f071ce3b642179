// `OpenContext`: what `Operator.open` gets.

import { WeirError, message } from "./errors.js";
import { ListState, MapState, Timers, ValueState } from "./runtime.js";

/** Given to `Operator.open`: where the instance runs, its configuration (`config`, the job
 * file's `config` table as an object) and the place to declare state. */
export class OpenContext {
  constructor(context) {
    this.operatorName = context.operatorName;
    this.subtask = context.subtask;
    this.parallelism = context.parallelism;
    this.configJson = context.config;
    const text = context.config.trim();
    try {
      this.config = text ? JSON.parse(text) : {};
    } catch (e) {
      throw new WeirError(`invalid config for operator \`${this.operatorName}\`: ${message(e)}`);
    }
  }

  valueState(name) {
    return new ValueState(name);
  }

  mapState(name) {
    return new MapState(name);
  }

  listState(name) {
    return new ListState(name);
  }

  timers() {
    return new Timers();
  }
}

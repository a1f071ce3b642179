// `OpenContext`: what `Operator.open` gets.

import { WeirError, message } from "./errors.js";
import {
  ListState,
  MapState,
  Timers,
  ValueState,
  VersionedListState,
  VersionedMapState,
  VersionedValueState,
} from "./runtime.js";

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

  /** One JSON value per key. With `{ version, migrate }` (version above 1), values carry
   * that version, and one stored by an older version of the operator is read through
   * `migrate(storedVersion, oldValue)`, once, and written back (`VersionedValueState`). */
  valueState(name, { version = 1, migrate = undefined } = {}) {
    if (version === 1 && migrate === undefined) return new ValueState(name);
    return new VersionedValueState(name, version, migrate);
  }

  /** A map from JSON keys to JSON values per key. With `{ version, migrate }` (version above
   * 1), values carry that version, as `valueState`'s do (`VersionedMapState`). */
  mapState(name, { version = 1, migrate = undefined } = {}) {
    if (version === 1 && migrate === undefined) return new MapState(name);
    return new VersionedMapState(name, version, migrate);
  }

  /** A list of JSON items per key. With `{ version, migrate }` (version above 1), items carry
   * that version, as `valueState`'s values do (`VersionedListState`). */
  listState(name, { version = 1, migrate = undefined } = {}) {
    if (version === 1 && migrate === undefined) return new ListState(name);
    return new VersionedListState(name, version, migrate);
  }

  timers() {
    return new Timers();
  }
}

// `Timer`: a timer that fired, as `Operator.onTimer` gets it.

import { utf8Decode } from "./bytes.js";

/** A timer that fired, given to `Operator.onTimer`: `key` (a Uint8Array), `timestamp`
 * (milliseconds), `tag` and `domain` ("event" or "processing"). */
export class Timer {
  constructor(key, timestamp, tag = 0, domain = "event") {
    this.key = key;
    this.timestamp = timestamp;
    this.tag = tag;
    this.domain = domain;
  }

  /** The key as text (UTF-8). */
  keyStr() {
    return utf8Decode(this.key);
  }
}

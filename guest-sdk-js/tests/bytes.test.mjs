// Unit tests of how `weir/bytes.js` encodes state values, with plain Node and no component:
//
//     node guest-sdk-js/tests/bytes.test.mjs
//
// exits non-zero on a failure. Bytes cross to the host as `{"$bytes": "<base64>"}`; the host
// stores them as CBOR byte strings (host/src/state/encoding.rs), so base64 here must be the
// standard alphabet with padding, exactly as the host's.

import assert from "node:assert/strict";
import { ByteBuffer, base64Decode, base64Encode, decode, encodeInto } from "../weir/bytes.js";

function encoded(value) {
  const buf = new ByteBuffer(16);
  encodeInto(buf, value);
  return buf.bytes.slice(0, buf.len);
}

// Base64 agrees with Node's own, at every length modulo 3.
for (let n = 0; n < 70; n++) {
  const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 89 + n * 7) & 255);
  const expected = Buffer.from(bytes).toString("base64");
  assert.equal(base64Encode(bytes), expected, `encode ${n} bytes`);
  assert.deepEqual(base64Decode(expected), bytes, `decode ${n} bytes`);
}
assert.throws(() => base64Decode("AA*A"), /not base64/);

// A Uint8Array in a state value round-trips as bytes, nested or alone.
const value = { id: new Uint8Array([0, 1, 255]), n: 3, list: [new Uint8Array([7])] };
const text = new TextDecoder().decode(encoded(value));
assert.equal(text, '{"id":{"$bytes":"AAH/"},"n":3,"list":[{"$bytes":"Bw=="}]}');
assert.deepEqual(decode(encoded(value)), value);
assert.deepEqual(decode(encoded(new Uint8Array([9, 8]))), new Uint8Array([9, 8]));

// An object with other keys beside `$bytes` stays an object; counters stay numbers.
const lookalike = { $bytes: "AAH/", other: 1 };
assert.deepEqual(decode(encoded(lookalike)), lookalike);
assert.equal(decode(encoded(42)), 42);
assert.deepEqual(decode(encoded({ a: [1.5, "x"] })), { a: [1.5, "x"] });

console.log("bytes.test.mjs: ok");

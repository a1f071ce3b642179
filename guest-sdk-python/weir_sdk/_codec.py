"""Encodings: state values as JSON text, text and bytes-like values as bytes, and the typecode
of the WIT's u32 columns.

State crosses to the host as JSON text, which CPython's `json` reads and writes in C; the host
stores it as CBOR, the one encoding every language reads (`host/src/state/encoding.rs`).
`bytes` have no JSON form of their own: they cross as `{"$bytes": "<base64>"}`, which the host
stores as a CBOR byte string, so that bytes a Rust operator stored read here as `bytes`."""

import json
from array import array
from base64 import b64decode, b64encode


def _bytes_as_json(value):
    """`json.dumps`'s `default`: called only for what JSON cannot say, so it costs nothing to
    other values."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": b64encode(value).decode()}
    raise TypeError(
        f"state values are JSON (dict, list, str, int, float, bool, None) or bytes, "
        f"not {type(value).__name__}"
    )


def _bytes_from_json(obj):
    """`json.loads`'s `object_hook`, used only for text that holds `"$bytes"`."""
    if len(obj) == 1 and type(obj.get("$bytes")) is str:
        return b64decode(obj["$bytes"])
    return obj


def _encode(value):
    """The JSON text of `value`, as UTF-8 bytes (integers without going through `json`)."""
    if type(value) is int:
        return str(value).encode()
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, default=_bytes_as_json
    ).encode()


def _decode(data):
    # Counters are the common case: plain digits parse without going through `json`.
    if data.isdigit():
        return int(data)
    if b'"$bytes"' in data:
        return json.loads(data, object_hook=_bytes_from_json)
    return json.loads(data)


#: The typecode of the WIT's u32 columns (an `apply` log: five words per operation; the ends
#: of an output batch): C `unsigned int`s, little-endian on wasm32, sent as their bytes.
_WORDS = "I"
assert array(_WORDS).itemsize == 4


def _as_bytes(value, call="emit", arg="value"):
    """`str` as UTF-8; `bytes` as it is; any other bytes-like object (`bytearray`,
    `memoryview`) copied into `bytes`. Anything else is a TypeError naming `call` and its
    argument `arg`: the slow branch of `emit`, so the type checks cost nothing to bytes and
    str."""
    if type(value) is str:
        return value.encode()
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(_wrong_type(call, arg, value)) from None
    return bytes(view)


def _wrong_type(call, arg, value):
    accepted = "bytes, bytearray, memoryview or str (UTF-8)"
    if arg == "key":
        return (
            f"{call}: a key is {accepted}, or None for a record without key, "
            f"not {type(value).__name__}; convert it first, e.g. str(key)"
        )
    hint = "; use emit_json(key, value) to emit other values as JSON" if call == "emit" else ""
    return f"{call}: a {arg} is {accepted}, not {type(value).__name__}{hint}"

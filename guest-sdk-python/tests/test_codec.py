"""Unit tests of `weir_sdk._codec` with plain CPython: how state values cross to the host.

The module is loaded from its file alone (it imports nothing else of the SDK). Bytes cross as
`{"$bytes": "<base64>"}`, which the host stores as a CBOR byte string
(`host/src/state/encoding.rs`)."""

import importlib.util
import unittest
from pathlib import Path

_FILE = Path(__file__).resolve().parent.parent / "weir_sdk" / "_codec.py"
_spec = importlib.util.spec_from_file_location("weir_codec", _FILE)
codec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(codec)


class CodecTest(unittest.TestCase):
    def test_counters_and_json_values_round_trip(self):
        for value in [0, 42, -3, 1.5, "é", [1, "a"], {"count": 2, "last_seen": None}, True]:
            self.assertEqual(codec._decode(codec._encode(value)), value)
        self.assertEqual(codec._encode(42), b"42")

    def test_bytes_cross_as_base64_objects(self):
        value = {"id": b"\x00\x01\xff", "list": [bytearray(b"\x07")], "n": 3}
        text = codec._encode(value)
        self.assertEqual(text, b'{"id":{"$bytes":"AAH/"},"list":[{"$bytes":"Bw=="}],"n":3}')
        self.assertEqual(
            codec._decode(text), {"id": b"\x00\x01\xff", "list": [b"\x07"], "n": 3}
        )
        self.assertEqual(codec._decode(codec._encode(b"\x09")), b"\x09")
        # An object with other keys beside `$bytes` stays a dict.
        lookalike = {"$bytes": "AAH/", "other": 1}
        self.assertEqual(codec._decode(codec._encode(lookalike)), lookalike)

    def test_what_json_cannot_say_is_a_type_error_naming_it(self):
        with self.assertRaisesRegex(TypeError, "not set"):
            codec._encode({1, 2})


if __name__ == "__main__":
    unittest.main()

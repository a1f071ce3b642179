"""Pipeline step 1, in Python: JSON-lines events into keyed records.

Each input line is an event such as `{"user": "u7", "page": "/docs", "action": "view",
"ms": 120}`. The operator emits it keyed by its page, with the value `action<TAB>user<TAB>ms`,
a flat form the next steps (C, Rust, JavaScript) read without a JSON parser. A line that is
not such an event is logged and skipped: one bad line must not stop the stream.
"""

import json

import weir_sdk


class Parse(weir_sdk.Operator):
    def open(self, ctx):
        self.skipped = 0

    def process(self, record, out):
        try:
            event = json.loads(record.value)
            page, action, user, ms = event["page"], event["action"], event["user"], event["ms"]
            if not all(isinstance(v, str) for v in (page, action, user)):
                raise ValueError("page, action and user must be strings")
            if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
                raise ValueError("ms must be a non-negative integer")
        except (ValueError, KeyError, TypeError) as e:
            self.skipped += 1
            weir_sdk.warn(f"skipping a line that is not an event ({e}): {record.value[:200]!r}")
            return
        out.emit(page.encode(), f"{action}\t{user}\t{ms}")


Processor = weir_sdk.export(Parse)

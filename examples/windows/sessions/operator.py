"""Per-user sessions of clicks, in Python (the windows example).

Input: click events keyed by user (the source's `key_pointer = "/user"`), stamped with their
event time. A session is a run of a user's clicks with less than `gap_ms` (default 30
minutes) between one and the next; it ends when the watermark passes its last click plus the
gap, and emits `{"user": .., "start": .., "end": .., "clicks": .., "pages": ..}`: its
bounds (the end is the last click plus the gap), how many clicks and how many distinct pages.
"""

import weir_sdk
from weir_sdk import windows


def _click(record):
    """What one click adds: a count of 1 and its page."""
    return [1, [record.value_json()["page"]]]


def _combine(a, b):
    """Two partial sessions as one: counts added, pages united (associative, as merging
    sessions needs)."""
    return [a[0] + b[0], sorted(set(a[1]) | set(b[1]))]


class Sessions(weir_sdk.Operator):
    def open(self, ctx):
        self.sessions = windows.session(
            ctx,
            "sessions",
            gap_ms=ctx.config.get("gap_ms", 30 * 60 * 1000),
            aggregate=windows.reduce(_combine, _click),
            on_fire=self.fire,
        )

    def process(self, record, out):
        self.sessions.add(record, out)

    def on_timer(self, timer, out):
        if not self.sessions.on_timer(timer, out):
            raise weir_sdk.WeirError(f"a timer this operator did not register: {timer!r}")

    def fire(self, key, start, end, result, out):
        clicks, pages = result
        out.emit_json(
            key,
            {"user": key.decode(), "start": start, "end": end, "clicks": clicks, "pages": len(pages)},
        )


Processor = weir_sdk.export(Sessions)

"""Per-page click counts in tumbling event-time windows, in Python (for tests/windows.rs): the
same operator as examples/windows/pages (Rust) and ../windows-js, over the Python SDK's windows
library, so that all three are held to one expectation. Config: `size_ms`,
`allowed_lateness_ms`."""

import weir_sdk
from weir_sdk import windows


class PageCounts(weir_sdk.Operator):
    def open(self, ctx):
        self.windows = windows.tumbling(
            ctx,
            "per-page",
            ctx.config.get("size_ms", 60_000),
            aggregate=windows.count(),
            on_fire=self.fire,
            allowed_lateness_ms=ctx.config.get("allowed_lateness_ms", 0),
        )

    def process(self, record, out):
        self.windows.add(record, out)

    def on_timer(self, timer, out):
        if not self.windows.on_timer(timer, out):
            raise weir_sdk.WeirError(f"not a window timer: {timer.tag}")

    def fire(self, key, start, end, clicks, out):
        out.emit_json(key, {"page": key.decode(), "start": start, "end": end, "clicks": clicks})


Processor = weir_sdk.export(PageCounts)

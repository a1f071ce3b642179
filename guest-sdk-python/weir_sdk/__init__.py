"""Write Weir stream operators in Python, compiled to components with componentize-py.

An operator is a subclass of `Operator`: `open(ctx)` reads the configuration and declares
keyed state, `process(record, out)` turns each input `Record` into any number of output
records written to `out` (an `Emitter`), and `close(out)` may emit final records at the end
of input. An operator may implement `process_batch(batch, out)` instead, which gets the whole
`Batch` as columns, reads and writes the value state of all its keys in one call each
(`ValueState.get_all` or `get_by_slot`, `set_all`) and emits many records in one call
(`Emitter.emit_columns`, `emit_many`): the faster way, as in a pandas or Arrow UDF.
`export(cls)` turns the class into the `Processor` class that componentize-py
exports as `weir:operator/processor`; the application module must bind it to the name
`Processor`:

    import weir_sdk

    class Counter(weir_sdk.Operator):
        def open(self, ctx):
            self.count = ctx.value_state("count")

        def process(self, record, out):
            n = (self.count.get() or 0) + 1
            self.count.set(n)
            out.emit(record.key, f"{record.key_str()}\\t{n}")

    Processor = weir_sdk.export(Counter)

Put the operator in `operator.py` and build it with `weir build`, which packs it and the
project's own modules into a runner made of this SDK, the one of the `weir` binary
(`_bundle.py`), and checks that they import; `weir new --lang python NAME` starts a project.

Like the Rust SDK, this one is built around the cost of the component boundary:

- Records arrive as one flat batch (`data`, `key-ends`, `value-ends`, `flags`, `timestamps`)
  plus one key slot per record; `process` sees them one at a time through a single reused
  `Record` (copy `record.key`/`record.value` if you keep them, they are plain `bytes`).
- A `ValueState` reads the values of *every* key slot of the batch in one `read-values`
  call, the first time it is read in a batch: plain integers are all decoded at once, other
  values on their slot's first use.
- All writes of a batch are buffered and reach the host in one `apply` call at the end of
  the batch (a value state sends one write per key it changed, whatever the number of
  `set`s). A map or list read first sends the pending writes (read your writes).
- Output records are collected and joined into one flat batch when the call returns.

Where the time goes (CPython compiled to WebAssembly, no JIT): every element of a WIT list
other than `list<u8>` would cross the boundary as its own Python object, so the WIT carries
every number column as little-endian bytes (`u32s`, `s64s`), one `bytes` each, which this SDK
views as numbers with `memoryview.cast` without a copy. The per-record loops below keep to
list indexing and C-level builtins (`zip`, `map`, `bytes.join`, `itertools.accumulate`,
`array` slices), build nothing per record that the batch does not need, and build the `apply`
log and the output columns once per batch.

State values, map keys, map values and list items cross to the host as JSON text (compact,
UTF-8), which the host stores as CBOR, the one encoding of state in every language: a count
of 5 written here reads as 5 in a Rust, JavaScript or C operator. They must be
JSON-serializable, or `bytes` (which cross as `{"$bytes": "<base64>"}` and are stored as CBOR
bytes; see docs/languages.md).

`Emitter.emit` takes keys and values as `bytes`, `bytearray`, `memoryview` or `str` (UTF-8)
and raises a `TypeError` at the call for anything else; `emit_json` writes any JSON value.

An exception raised by `open`, `process` or `close` fails the job with its message and its
traceback, as Python prints it but without this SDK's frames and without source lines
(reading them would call on a file system the component does not have): each frame's file,
line and function. From `process`,
the host also learns which record of the batch was being processed. The writes of the failed
batch are dropped and so are the records it emitted; the host may roll the batch's state back
and process it again without the failing record, so an operator keeps nothing of a failed
batch in its own attributes either.
"""

__all__ = [
    "Operator",
    "OpenContext",
    "Record",
    "Batch",
    "Emitter",
    "ValueState",
    "MapState",
    "ListState",
    "Timers",
    "Timer",
    "WeirError",
    "export",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
]

# The package is one concept per module; this file gathers what operators import. In order
# of the layers: the leaves first, then what builds on them.
from . import _logging
from ._errors import WeirError
from ._guest_log import _count_dropped_late, debug, error, info, trace, warn
from ._records import HAS_KEY, HAS_TIMESTAMP, NO_SLOT, Batch, Record
from ._emitter import Emitter
from ._timer import Timer
from ._runtime import ListState, MapState, Timers, ValueState, _batch_rows, _key_slot
from ._operator import OpenContext, Operator
from ._failures import _failure, _message
from ._export import export

# `logging` at every level, into the guest log (guest-sdk-python/weir_sdk/_logging.py).
_logging.install()

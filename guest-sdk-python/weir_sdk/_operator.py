"""The operator's side of the contract: the `Operator` base class and the `OpenContext` its
`open` gets."""

import json

from ._errors import WeirError
from ._runtime import ListState, MapState, Timers, ValueState
from ._versions import VersionedListState, VersionedMapState, VersionedValueState


class OpenContext:
    """Given to `Operator.open`: where the instance runs, its configuration (`config`, the
    job file's `config` table as a dict) and the place to declare state."""

    def __init__(self, context):
        self.operator_name = context.operator_name
        self.subtask = context.subtask
        self.parallelism = context.parallelism
        self.config_json = context.config
        text = context.config.strip()
        try:
            self.config = json.loads(text) if text else {}
        except ValueError as e:
            raise WeirError(f"invalid config for operator `{self.operator_name}`: {e}") from None

    def value_state(self, name, version=1, migrate=None):
        """One JSON value per key. With `version` above 1, values carry that version and a
        value stored by an older version of the operator is read through
        `migrate(stored_version, old_value)`, once, and written back (see `_versions.py`)."""
        if version == 1 and migrate is None:
            return ValueState(name)
        return VersionedValueState(name, version, migrate)

    def map_state(self, name, version=1, migrate=None):
        """A map from JSON keys to JSON values per key. With `version` above 1, values carry
        that version, as `value_state`'s do (see `_versions.py`)."""
        if version == 1 and migrate is None:
            return MapState(name)
        return VersionedMapState(name, version, migrate)

    def list_state(self, name, version=1, migrate=None):
        """A list of JSON items per key. With `version` above 1, items carry that version,
        as `value_state`'s values do (see `_versions.py`)."""
        if version == 1 and migrate is None:
            return ListState(name)
        return VersionedListState(name, version, migrate)

    def timers(self):
        return Timers()


class Operator:
    """Base class of operators. The SDK creates one instance per subtask (without arguments),
    then calls `open` once, `process` for every record, `close` at the end of input."""

    def open(self, ctx):
        pass

    def process(self, record, out):
        raise NotImplementedError("an operator must implement process(record, out) or process_batch(batch, out)")

    #: `process_batch(batch, out)`, if an operator defines it, is called once per batch
    #: instead of `process` once per record: `batch` is a `Batch` (columns), the value state
    #: of all its keys is read and written with `ValueState.get_all` and `set_all`, and
    #: `out.emit_columns` or `out.emit_many` emit many records at once. Map and list state and
    #: timers act on the key chosen with `batch.focus(slot)`, and `MapState.get_many` reads
    #: the maps of many keys in one host call.
    process_batch = None

    def on_timer(self, timer, out):
        """Handles a `Timer` that fired; state acts on `timer.key` here."""
        raise WeirError(
            f"a timer fired (tag {timer.tag}, at {timer.timestamp}) but the operator does not "
            "implement on_timer(timer, out)"
        )

    def close(self, out):
        pass

"""Lines to the guest log, at each level, and the counts an operator reports to the host
(records dropped as too late, for the run summary, `/metrics` and the console)."""

from wit_world.imports import log as _log, metrics as _metrics


def trace(message):
    _log.log(_log.Level.TRACE, str(message))


def debug(message):
    _log.log(_log.Level.DEBUG, str(message))


def info(message):
    _log.log(_log.Level.INFO, str(message))


def warn(message):
    _log.log(_log.Level.WARN, str(message))


def error(message):
    _log.log(_log.Level.ERROR, str(message))


def _count_dropped_late(records):
    """Counts `records` dropped as too late for event time into the host's per-operator count
    (the run summary, `/metrics`, the console). `weir_sdk.windows` calls it."""
    _metrics.count_dropped_late(records)

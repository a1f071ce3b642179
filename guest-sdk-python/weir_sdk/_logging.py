"""Python's `logging` into the guest log, each record at its own level, once.

The SDK installs one handler on the root logger when it is imported, and opens the root
logger to every level: the host's log filter (`weir run -v`, `RUST_LOG`) decides what is
shown, as it does for the SDK's own `info` and `warn`. So `logging.info(...)` reaches
`weir job --logs` and the console like `weir_sdk.info(...)`, and the level is carried by the
log line, not repeated in its text: the root logger's records read as their message, a named
logger's as `name: message`.

`logging.basicConfig` without a stream, file or handlers replaces that handler with one into
the guest log (its `level` and `format` apply); with one of them it works as in any Python,
and records go there instead (a sandboxed operator has no files to open, so in practice that
is a stream).
"""

import logging

from wit_world.imports import log as _log


class GuestFormatter(logging.Formatter):
    """A record as its message, prefixed by its logger's name unless that is the root
    logger, and followed by its exception's traceback when it has one."""

    def __init__(self):
        super().__init__("%(message)s")

    def format(self, record):
        text = super().format(record)
        if record.name != "root":
            text = f"{record.name}: {text}"
        return text


def _level(levelno):
    if levelno >= logging.ERROR:
        return _log.Level.ERROR
    if levelno >= logging.WARNING:
        return _log.Level.WARN
    if levelno >= logging.INFO:
        return _log.Level.INFO
    if levelno >= logging.DEBUG:
        return _log.Level.DEBUG
    return _log.Level.TRACE


class GuestLogHandler(logging.Handler):
    """Each record, formatted, into the guest log at the record's level (one host call)."""

    def __init__(self, level=logging.NOTSET):
        super().__init__(level)
        self.setFormatter(GuestFormatter())

    def emit(self, record):
        try:
            _log.log(_level(record.levelno), self.format(record))
        except Exception:
            self.handleError(record)


_basic_config = logging.basicConfig


def _basic_config_into_the_log(**kwargs):
    if not any(kwargs.get(name) for name in ("stream", "filename", "handlers")):
        handler = GuestLogHandler()
        if kwargs.get("format") is not None:
            # basicConfig gives a formatter only to handlers without one.
            handler.formatter = None
        kwargs["handlers"] = [handler]
    # The root logger already has the SDK's handler: without `force`, basicConfig would do
    # nothing at all.
    kwargs.setdefault("force", True)
    _basic_config(**kwargs)


_basic_config_into_the_log.__doc__ = _basic_config.__doc__


def install():
    """Routes `logging` into the guest log (see the module's documentation)."""
    root = logging.getLogger()
    if not any(isinstance(handler, GuestLogHandler) for handler in root.handlers):
        root.addHandler(GuestLogHandler())
    root.setLevel(logging.NOTSET)
    logging.basicConfig = _basic_config_into_the_log
    logging.lastResort = GuestLogHandler(logging.WARNING)

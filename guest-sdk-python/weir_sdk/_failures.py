"""What the host shows of an exception: its message and traceback, without the SDK's frames."""

import importlib
import os
import re

from componentize_py_types import Err
from wit_world.imports import types as _types

from ._errors import WeirError


def _message(e):
    """What the host shows of an exception: `Type: message` (an SDK or host error: its
    message), then its traceback."""
    if isinstance(e, Err):
        return str(e.value)
    first = str(e) if isinstance(e, WeirError) else _exception_line(e)
    lines = []
    _traceback_lines(e, lines, {id(e)}, last=False)
    return "\n".join([first, *lines]) if lines else first


#: Files whose frames are left out of tracebacks: the SDK's own modules but its libraries
#: (`windows.py`, whose frames are part of the operator's story), among them the runner that
#: imports the operator (`_bundle.py`) and the finder of last resort (`_preload.py`), and the
#: import machinery between the runner and the operator.
_HIDDEN_FILES = frozenset(
    (
        *(
            os.path.join(os.path.dirname(__file__), name)
            for name in (
                "__init__.py",
                "_bundle.py",
                "_codec.py",
                "_emitter.py",
                "_errors.py",
                "_export.py",
                "_failures.py",
                "_guest_log.py",
                "_logging.py",
                "_operator.py",
                "_preload.py",
                "_records.py",
                "_runtime.py",
                "_timer.py",
            )
        ),
        importlib.__file__,
        "<frozen importlib._bootstrap>",
        "<frozen importlib._bootstrap_external>",
    )
)
#: The folders componentize-py puts the staged modules and the project's under (`/0/`, `/1/`).
_MOUNT = re.compile(r"^/\d+/")


def _exception_line(e):
    """`Type: message`, as the last line of a Python traceback (qualified outside builtins)."""
    kind = type(e)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__", "weir_operator"):
        name = f"{kind.__module__}.{name}"
    text = str(e)
    return f"{name}: {text}" if text else name


def _source_name(path):
    """A frame's file as the project names it. The runner compiles the packed files under
    their names in the project (`_bundle.py`); a module componentized as the application
    (`weir_operator.py`, under a mount of componentize-py) is named `operator.py` too."""
    path = _MOUNT.sub("", path)
    if path == "weir_operator.py":
        return "operator.py"
    return path


def _traceback_lines(e, lines, seen, last=True):
    """Appends the traceback of `e` as Python prints it, with the exceptions it was raised from
    or while handling first, and without this SDK's frames or source lines: reading source
    files would call on a file system the component does not have. `last`: end with the
    exception's own line."""
    cause, context = e.__cause__, e.__context__
    if cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        _traceback_lines(cause, lines, seen)
        lines += ["", "The above exception was the direct cause of the following exception:", ""]
    elif context is not None and not e.__suppress_context__ and id(context) not in seen:
        seen.add(id(context))
        _traceback_lines(context, lines, seen)
        lines += ["", "During handling of the above exception, another exception occurred:", ""]
    frames = []
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename not in _HIDDEN_FILES:
            line = "?" if tb.tb_lineno is None else tb.tb_lineno
            name = getattr(code, "co_qualname", code.co_name)
            frames.append(f'  File "{_source_name(code.co_filename)}", line {line}, in {name}')
        tb = tb.tb_next
    if frames:
        lines.append("Traceback (most recent call last):")
        lines += frames
    if last:
        lines.append(_exception_line(e))


def _failure(e, record=None):
    """The WIT `failure` of an exception raised while processing record `record`."""
    return Err(_types.Failure(_message(e), record))

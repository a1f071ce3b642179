"""The runner: the `Processor` of every Python component, which imports the operator from
the files `weir build` packed into the component.

componentize-py takes seconds to make a component (it compiles the interpreter and imports
the standard library each time), so `weir build` runs it once per SDK and toolchain, with
this module as the application, and packs each build's `operator.py` and the project's own
modules into a copy of that runner (the `bundle` import of `wit/operator.wit`). At the first
call of a component instance (`open`), `load` reads the packed files, puts a finder for them
on `sys.meta_path` and imports `operator.py` as the module `weir_operator`; the calls then go
to the `Processor` class it binds (`weir_sdk.export`).

Module-level code of `operator.py` therefore runs once per subtask, as it starts, the way
Python runs a program's modules; the standard library was imported when the runner was built
(`_preload.py`), so an import of it costs nothing at run time.

`weir build` checks each build by calling `close` on an instance that was never opened: the
operator's modules load (or fail to, with `LOAD_FAILED` and Python's traceback), and a
loaded operator answers that it is not open.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from wit_world.imports import bundle as _bundle

from . import WeirError, _failure, _message
from componentize_py_types import Err

#: `operator.py` is imported under this name: `operator` is a standard library module.
OPERATOR_MODULE = "weir_operator"
OPERATOR_FILE = "operator.py"
#: How a failure to load the operator's modules begins (`weir build` looks for it).
LOAD_FAILED = "operator.py cannot be loaded: "


def files(data):
    """The packed files, name -> contents, from the `bundle.files` encoding: per file, its
    name's length (u32, little-endian), its name, its contents' length and its contents."""
    out = {}
    at = 0
    while at < len(data):
        parts = []
        for _ in range(2):
            length = int.from_bytes(data[at : at + 4], "little")
            parts.append(bytes(data[at + 4 : at + 4 + length]))
            at += 4 + length
        out[parts[0].decode()] = parts[1]
    return out


class BundleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds modules among the packed files: `name.py`, or `name/__init__.py` for a package,
    and `operator.py` as `weir_operator`. Source is compiled as it is imported, under the
    file's name in the project, so tracebacks name the project's files."""

    def __init__(self, files):
        self.files = files

    def _file(self, name):
        if name == OPERATOR_MODULE:
            return OPERATOR_FILE, False
        path = name.replace(".", "/")
        for file, package in ((f"{path}/__init__.py", True), (f"{path}.py", False)):
            if file in self.files:
                return file, package
        return None

    def find_spec(self, name, path=None, target=None):
        found = self._file(name)
        if found is None:
            return None
        file, package = found
        spec = importlib.util.spec_from_loader(name, self, origin=file, is_package=package)
        spec.has_location = True
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        file = module.__spec__.origin
        code = compile(self.files[file], file, "exec", dont_inherit=True)
        exec(code, module.__dict__)


# The operator's `Processor` class, once `load` imported it.
_processor = None


def load():
    """Imports the operator from the packed files (once per instance) and returns the
    `Processor` class it binds."""
    global _processor
    if _processor is None:
        finder = BundleFinder(files(_bundle.files()))
        if OPERATOR_FILE not in finder.files:
            raise WeirError("the component packs no operator.py: rebuild it with `weir build`")
        # Before the last finder, `_preload`'s, which says a module is not in the component.
        sys.meta_path.insert(max(len(sys.meta_path) - 1, 0), finder)
        module = importlib.import_module(OPERATOR_MODULE)
        processor = getattr(module, "Processor", None)
        if processor is None:
            raise WeirError(
                "operator.py binds no `Processor`: end it with "
                "`Processor = weir_sdk.export(YourOperator)`"
            )
        _processor = processor
    return _processor


def _loaded(call):
    if _processor is None:
        raise _failure(WeirError(f"the operator is not open: {call} called before open"))
    return _processor()


class Processor:
    """What componentize-py exports: the operator's `Processor`, imported at `open`."""

    def open(self, ctx):
        try:
            processor = load()
        except Exception as e:
            raise Err(LOAD_FAILED + _message(e)) from None
        return processor().open(ctx)

    def process(self, batch, key_slots):
        return _loaded("process").process(batch, key_slots)

    def on_timers(self, timers):
        return _loaded("on_timers").on_timers(timers)

    def close(self):
        try:
            processor = load()
        except Exception as e:
            raise _failure(WeirError(LOAD_FAILED + _message(e))) from None
        return processor().close()

"""Imports, while `weir build` makes the Python runner, every module an operator may import later.

componentize-py runs the application module once at build time and keeps the interpreter's
memory as it was then: a module is in the component if and only if it was imported by then
(or is packed into it as source, as the operator's own modules are: `_bundle.py`). A
component has no files at run time (the sandbox grants none), so a standard library module
first imported inside `process` would not be found. The runner's application module
therefore calls `run`, which imports:

- the standard library: every module of `sys.stdlib_module_names` and every submodule of its
  packages, except those that are no use in a sandbox without a terminal, a display or
  processes (`SKIPPED`) and those that fail to import under WASI (`ssl`, `ctypes`, ...);
- the modules and packages named in `project` (the runner names none: the operator's own
  modules come from the bundle), with their submodules.

A module that is not in the component, or failed to import at build time, raises
`ModuleNotFoundError` (an `ImportError`) at run time, saying so, and never traps.
"""

import importlib
import pkgutil
import sys

# Packages and modules left out: tests, tools of the interpreter's installation, GUIs and
# modules whose import has effects (`antigravity` opens a browser, `this` prints).
SKIPPED = frozenset(
    (
        "__hello__",
        "__phello__",
        "antigravity",
        "this",
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "turtle",
        "turtledemo",
        "ensurepip",
        "venv",
        "lib2to3",
        "distutils",
        "pydoc_data",
        "pydoc",
        "doctest",
        "unittest",
    )
)

# Modules that failed to import at build time: name -> the error, as `Type: message`.
_failed = {}


def _import(name):
    if any(part in SKIPPED for part in name.split(".")):
        return None
    try:
        return importlib.import_module(name)
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: nothing stops a build
        _failed[name] = f"{type(e).__name__}: {e}"
        return None


def _import_tree(name):
    module = _import(name)
    path = getattr(module, "__path__", None)
    if path is not None:
        for info in pkgutil.walk_packages(path, name + ".", onerror=lambda _: None):
            _import(info.name)


class _NotInComponent:
    """The last finder on `sys.meta_path`: a module nobody found is not in the component."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if name in _failed:
            why = f"it failed to import when the component was built ({_failed[name]})"
        elif top in SKIPPED and top in sys.stdlib_module_names:
            why = "Weir components leave this part of the standard library out"
        else:
            why = (
                "it was not found when the component was built; an operator's own modules "
                "belong in its project folder, beside operator.py"
            )
        raise ModuleNotFoundError(f"No module named {name!r}: {why}", name=name)


def run(project):
    """Imports the standard library and the modules named in `project`. Only while a
    component is built: under another Python (running an operator's unit tests) it does
    nothing."""
    if sys.platform != "wasi":
        return
    # Some modules configure `logging` or `warnings` as they are imported: the operator
    # finds both as its own imports left them.
    import logging
    import warnings

    handlers, level = list(logging.root.handlers), logging.root.level
    filters = list(warnings.filters)
    for name in sorted(sys.stdlib_module_names):
        if not name.startswith("_"):
            _import_tree(name)
    logging.root.handlers[:] = handlers
    logging.root.setLevel(level)
    warnings.filters[:] = filters
    # The SDK's own library, for an operator that imports it inside a function.
    for name in ["weir_sdk.windows", *project]:
        _import_tree(name)
    sys.meta_path.append(_NotInComponent)

"""Unit tests of `weir_sdk._logging` with plain CPython: `logging` into a stub of the
component's `log` import, which keeps what it is given.

    python3 -m unittest discover -s guest-sdk-python/tests

The module is loaded from its file alone (it imports nothing else of the SDK); a stub
`wit_world.imports.log` stands in for the host.
"""

import enum
import importlib.util
import logging
import sys
import types
import unittest
from pathlib import Path

_SDK = Path(__file__).resolve().parent.parent / "weir_sdk"


class Level(enum.Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


#: (level name, message) of every call into the stub log.
logged = []


def _import_logging():
    log = types.ModuleType("wit_world.imports.log")
    log.Level = Level
    log.log = lambda level, message: logged.append((level.name, message))
    imports = types.ModuleType("wit_world.imports")
    imports.log = log
    world = types.ModuleType("wit_world")
    world.imports = imports
    sys.modules.update(
        {"wit_world": world, "wit_world.imports": imports, "wit_world.imports.log": log}
    )
    spec = importlib.util.spec_from_file_location("weir_sdk_logging", _SDK / "_logging.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


guest_logging = _import_logging()


class LoggingTest(unittest.TestCase):
    def setUp(self):
        root = logging.getLogger()
        self.saved = (list(root.handlers), root.level, logging.basicConfig, logging.lastResort)
        root.handlers[:] = []
        root.setLevel(logging.WARNING)
        guest_logging.install()
        logged.clear()

    def tearDown(self):
        root = logging.getLogger()
        handlers, level, logging.basicConfig, logging.lastResort = self.saved
        root.handlers[:] = handlers
        root.setLevel(level)

    def test_every_level_arrives_once_at_its_own_level(self):
        logging.debug("d")
        logging.info("i")
        logging.warning("w")
        logging.error("e")
        logging.critical("c")
        logging.log(5, "t")
        self.assertEqual(
            logged,
            [
                ("DEBUG", "d"),
                ("INFO", "i"),
                ("WARN", "w"),
                ("ERROR", "e"),
                ("ERROR", "c"),
                ("TRACE", "t"),
            ],
        )

    def test_a_named_logger_is_named_and_a_traceback_follows_its_message(self):
        logging.getLogger("pages.counter").info("opened %d", 3)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.exception("failed")
        self.assertEqual(logged[0], ("INFO", "pages.counter: opened 3"))
        level, message = logged[1]
        self.assertEqual(level, "ERROR")
        self.assertTrue(message.startswith("failed\nTraceback"), message)
        self.assertIn("ValueError: boom", message)
        self.assertEqual(len(logged), 2)

    def test_basic_config_sets_the_level_and_keeps_one_handler(self):
        logging.basicConfig(level=logging.INFO)
        logging.debug("hidden")
        logging.info("shown")
        self.assertEqual(logged, [("INFO", "shown")])
        self.assertEqual(len(logging.getLogger().handlers), 1)

    def test_basic_config_format_applies(self):
        logging.basicConfig(format="%(levelname)s %(message)s")
        logging.warning("w")
        self.assertEqual(logged, [("WARN", "WARNING w")])

    def test_installing_twice_adds_no_second_handler(self):
        guest_logging.install()
        logging.info("once")
        self.assertEqual(logged, [("INFO", "once")])


if __name__ == "__main__":
    unittest.main()

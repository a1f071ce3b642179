"""A Python operator that reaches for everything a sandbox grants or refuses, for
tests/sandbox.rs.

For each record it prints to stdout and stderr, logs through `logging` and the SDK, and
emits one record per check, `check=result`:

- `python_version=3.N`, the CPython inside the component;
- `wall_clock=SECONDS` (`time.time()`), `datetime=YEAR` (`datetime.now()`),
  `monotonic=ok` (`time.monotonic()` does not go back);
- `random=HEX,HEX` (two draws of `os.urandom`), `uuid=4` (`uuid.uuid4().version`);
- `lazy_import=2` (`statistics`, imported here and nowhere else; `helpers`, one of the
  operator's own modules, imported here too);
- `missing_module=refused: ModuleNotFoundError` for a module that exists nowhere;
- `file=`, `env=`, `socket=`: `refused: ErrorType` when opening `/etc/passwd`, reading
  `WEIR_PROBE_SECRET` and connecting to `127.0.0.1:PORT` (config `port`) raise, or what
  was read if they do not; `environ=N`, the number of environment variables.
"""

import logging
import os
import sys
import time

import weir_sdk


def refused(attempt):
    try:
        return f"granted: {attempt()!r}"
    except Exception as e:
        return f"refused: {type(e).__name__}"


class Probe(weir_sdk.Operator):
    def open(self, ctx):
        self.port = int(ctx.config.get("port", 9))

    def process(self, record, out):
        print("probe: printed to stdout")
        print("probe: printed to stderr", file=sys.stderr)
        logging.info("probe: logging.info")
        logging.warning("probe: logging.warning")
        logging.error("probe: logging.error")
        logging.getLogger("probe.named").warning("logging.getLogger")
        weir_sdk.info("probe: weir_sdk.info")

        from datetime import datetime

        before = time.monotonic()
        out.emit(record.key, f"python_version={sys.version_info[0]}.{sys.version_info[1]}")
        out.emit(record.key, f"wall_clock={int(time.time())}")
        out.emit(record.key, f"datetime={datetime.now().year}")
        out.emit(record.key, f"monotonic={'ok' if time.monotonic() >= before else 'went back'}")

        import random
        import uuid

        out.emit(record.key, f"random={os.urandom(16).hex()},{os.urandom(16).hex()}")
        out.emit(record.key, f"random_module={0 <= random.random() < 1}")
        out.emit(record.key, f"uuid={uuid.uuid4().version}")

        import statistics

        import helpers

        out.emit(record.key, f"lazy_import={statistics.median([3, 1, 2])}{helpers.SUFFIX}")

        def read_file():
            with open("/etc/passwd") as f:
                return f.read(10)

        def connect():
            import socket

            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(("127.0.0.1", self.port))
                return s.getpeername()

        out.emit(record.key, f"missing_module={refused(lambda: __import__('not_in_the_component'))}")
        out.emit(record.key, f"file={refused(read_file)}")
        out.emit(record.key, f"env={refused(lambda: os.environ['WEIR_PROBE_SECRET'])}")
        out.emit(record.key, f"environ={len(os.environ)}")
        out.emit(record.key, f"socket={refused(connect)}")


Processor = weir_sdk.export(Probe)

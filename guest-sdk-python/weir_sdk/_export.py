"""`export`: the `Processor` class componentize-py exports, which drives an operator."""

from componentize_py_types import Err

from ._emitter import Emitter
from ._errors import WeirError
from ._failures import _failure, _message
from ._operator import OpenContext
from ._runtime import _Batch, _rt, _run, _run_columns, _run_timers


def export(operator_class):
    """The `Processor` class componentize-py exports, driving instances of `operator_class`.
    Bind it in the application module: `Processor = weir_sdk.export(MyOperator)`."""

    # componentize-py may make a new `Processor` for every call: the instance's operator and
    # emitter live in the class, one per component instance.
    class Processor:
        operator = None
        out = Emitter()

        def open(self, ctx):
            if Processor.operator is not None:
                raise Err("open called on an operator instance that is already open")
            _rt.in_open = True
            try:
                operator = operator_class()
                operator.open(OpenContext(ctx))
            except Exception as e:
                raise Err(_message(e)) from None
            finally:
                _rt.in_open = False
            Processor.operator = operator

        def process(self, batch, key_slots):
            operator = Processor._open_operator("process")
            process_batch = operator.process_batch
            if process_batch is not None:
                return Processor._run_batch(_run_columns, process_batch, batch, key_slots)
            return Processor._run_batch(_run, operator.process, batch, key_slots)

        def on_timers(self, timers):
            operator = Processor._open_operator("on_timers")
            return Processor._run_batch(_run_timers, operator.on_timer, timers)

        @staticmethod
        def _open_operator(call):
            operator = Processor.operator
            if operator is None:
                raise _failure(WeirError(f"the operator is not open: {call} called before open or after close"))
            return operator

        @staticmethod
        def _run_batch(run, handler, *args):
            """Runs `handler` over a batch (of records or timers) with `run`, and returns what
            it emitted; on an exception, nothing of the call is kept: its state writes and
            output are dropped, and the failure names the record being handled."""
            out = Processor.out
            try:
                run(handler, out, *args)
                _rt.finish()
                return out._take()
            except Exception as e:
                record = _Batch.record()
                if record is None and isinstance(e, WeirError) and type(e.record) is int:
                    record = e.record
                _Batch.slots = None
                _rt.abort()
                out._discard()
                raise _failure(e, record) from None

        def close(self):
            operator = Processor._open_operator("close")
            Processor.operator = None
            out = Processor.out
            try:
                operator.close(out)
                return out._take()
            except Exception as e:
                out._discard()
                raise _failure(e) from None

    Processor.__name__ = Processor.__qualname__ = "Processor"
    return Processor

"""{{name}}: a Weir operator. It counts the records of each key and emits, for every record,
`key<TAB>count` under the same key.

Build it with `weir build`, run it with `weir run job.toml`. `weir build` stages the SDK,
`weir_sdk`, beside this file (its source: guest-sdk-python/ in the Weir repository).
"""

import weir_sdk


class Counter(weir_sdk.Operator):
    def open(self, ctx):
        # Records seen per key: kept by the host, checkpointed with the job.
        self.count = ctx.value_state("count")

    def process(self, record, out):
        if record.key is None:
            raise weir_sdk.WeirError("records need a key: set key_by for this operator in the job file")
        count = self.count.get(0) + 1
        self.count.set(count)
        out.emit(record.key, f"{record.key_str()}\t{count}")


# The class componentize-py exports as weir:operator/processor.
Processor = weir_sdk.export(Counter)

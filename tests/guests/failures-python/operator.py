"""A Python operator that fails on demand, for tests/guest_failures.rs.

Its behaviour is chosen by the config `{ mode = "...", word = "..." }`. It passes every record
through, except a record whose value is `word`, on which, by mode:

- `raise-in-helper`: the helper function `check_word` raises a ValueError;
- `emit-dict`: it emits a dict as the value;
- `emit-int-key`: it emits an int as the key;
- `passthrough` (the default): nothing special.
"""

import weir_sdk

MODES = ("passthrough", "raise-in-helper", "emit-dict", "emit-int-key")


def check_word(word):
    raise ValueError(f"the word {word!r} is not welcome here")


class Failures(weir_sdk.Operator):
    def open(self, ctx):
        self.mode = ctx.config.get("mode", "passthrough")
        self.word = ctx.config.get("word")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")

    def process(self, record, out):
        value = record.value
        if self.word is not None and value == self.word.encode():
            if self.mode == "raise-in-helper":
                check_word(self.word)
            elif self.mode == "emit-dict":
                out.emit(record.key, {"word": self.word})
            elif self.mode == "emit-int-key":
                out.emit(7, value)
        out.emit(record.key, value)


Processor = weir_sdk.export(Failures)

"""Every state call of the Python SDK, for tests/sdk_state.rs (the same logic as
../state-tour-js/operator.js; the test states it once more in Rust).

With `config = { role = "split" }`, each input line `KEY VALUE` becomes a record keyed by
KEY with the value VALUE. Otherwise, for each keyed record with value `v`:

- value state `last`: holds the previous value (an integer where `v` is digits, else text);
  `del` removes it;
- map state `seen` (value -> how often): `forget` clears it, `-x` removes `x`, anything else
  counts `v`;
- list state `history`: `reset` clears it, anything else is appended;

and it emits `KEY|previous last|seen[target]|len(history)|seen's keys joined by ,|len(seen)`
where `target` is `x` for `-x` and `v` otherwise.
"""

import weir_sdk


class Tour(weir_sdk.Operator):
    def open(self, ctx):
        self.split = ctx.config.get("role") == "split"
        if not self.split:
            self.last = ctx.value_state("last")
            self.seen = ctx.map_state("seen")
            self.history = ctx.list_state("history")

    def process(self, record, out):
        if self.split:
            key, value = record.value_str().split(" ", 1)
            out.emit(key, value)
            return
        v = record.value_str()
        prev = self.last.get("-")
        if v == "del":
            self.last.remove()
        else:
            self.last.set(int(v) if v.isdigit() else v)
        target = v
        if v == "forget":
            self.seen.clear()
        elif v.startswith("-"):
            target = v[1:]
            self.seen.remove(target)
        else:
            self.seen.put(v, self.seen.get(v, 0) + 1)
        if v == "reset":
            self.history.clear()
        else:
            self.history.append(v)
        keys = ",".join(self.seen.keys())
        line = f"{record.key_str()}|{prev}|{self.seen.get(target, 0)}|{len(self.history.get())}|{keys}"
        out.emit(record.key, f"{line}|{len(self.seen)}")


Processor = weir_sdk.export(Tour)

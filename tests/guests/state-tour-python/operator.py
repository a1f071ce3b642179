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

With `role = "count-v1"` or `"count-v2"`: two versions of a keyed counter, for upgrade tests.
Version 1 keeps `{"count": n}` per key and emits `KEY\tn`; version 2 keeps
`{"total": n, "last_seen": v}` (the state's version 2, migrated from version 1's values as
they are read) and emits `KEY\tn\tv`. `role = "map-count-v1"` and `"map-count-v2"` do the
same with the count in a map state (`counts`, under the map key `n`) whose values gain a version;
`"list-count-v1"` and `"list-count-v2"` with it as the one item of a list state.
"""

import weir_sdk


def count_from_v1(version, old):
    if version != 1:
        raise weir_sdk.WeirError(f"no migration from version {version}")
    return {"total": old["count"], "last_seen": ""}


class MapEntry:
    """The count of `map-count-v1` and `map-count-v2`: a map state's entry `n`, read and
    written as the value state of `count-v1` and `count-v2` is."""

    def __init__(self, map_state):
        self.map = map_state

    def get(self, default):
        # Through `get_many` (for the record's own slot), so that a versioned map's batch read
        # migrates what it reads as `get` does.
        return self.map.get_many([weir_sdk._key_slot()], ["n"], default)[0]

    def set(self, value):
        self.map.put("n", value)


class ListItem:
    """The count of `list-count-v1` and `list-count-v2`: the one item of a list state."""

    def __init__(self, list_state):
        self.list = list_state

    def get(self, default):
        # Through `get_many`, as `MapEntry.get`.
        items = self.list.get_many([weir_sdk._key_slot()])[0]
        return items[-1] if items else default

    def set(self, value):
        self.list.clear()
        self.list.append(value)


class Tour(weir_sdk.Operator):
    def open(self, ctx):
        role = ctx.config.get("role")
        self.split = role == "split"
        counter = (role or "").removeprefix("map-").removeprefix("list-")
        self.counter = counter if counter in ("count-v1", "count-v2") else None
        if role == "count-v1":
            self.counts = ctx.value_state("count")
        elif role == "count-v2":
            self.counts = ctx.value_state("count", version=2, migrate=count_from_v1)
        elif role == "map-count-v1":
            self.counts = MapEntry(ctx.map_state("counts"))
        elif role == "map-count-v2":
            self.counts = MapEntry(ctx.map_state("counts", version=2, migrate=count_from_v1))
        elif role == "list-count-v1":
            self.counts = ListItem(ctx.list_state("counts"))
        elif role == "list-count-v2":
            self.counts = ListItem(ctx.list_state("counts", version=2, migrate=count_from_v1))
        elif not self.split:
            self.last = ctx.value_state("last")
            self.seen = ctx.map_state("seen")
            self.history = ctx.list_state("history")

    def process(self, record, out):
        if self.split:
            key, value = record.value_str().split(" ", 1)
            out.emit(key, value)
            return
        if self.counter == "count-v1":
            n = self.counts.get({"count": 0})["count"] + 1
            self.counts.set({"count": n})
            out.emit(record.key, f"{record.key_str()}\t{n}")
            return
        if self.counter == "count-v2":
            n = self.counts.get({"total": 0})["total"] + 1
            v = record.value_str()
            self.counts.set({"total": n, "last_seen": v})
            out.emit(record.key, f"{record.key_str()}\t{n}\t{v}")
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

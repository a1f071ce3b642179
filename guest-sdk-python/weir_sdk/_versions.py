"""State that evolves: a value state declared with a version and a migration
(`ctx.value_state(name, version=2, migrate=fn)`), and a map state whose values are
(`ctx.map_state(name, version=2, migrate=fn)`, `VersionedMapState`) or a list state whose
items are (`ctx.list_state(name, version=2, migrate=fn)`, `VersionedListState`).

A value of version 1 is stored as its plain JSON, as every value state stored it before
versions existed. A value of version 2 or later is stored as `{"$version": N, "$value": V}`.
A read looks at what it decoded: a value of the declared version is returned as is; an older
one goes through `migrate(stored_version, old_value)` once, as it is read, and is written back
in the new version with the batch's writes; a newer one (written by a later version of the
operator, restored into this one) is an error. A dict field added with a default needs no new
version: read it with `value.get("field", default)`, or `{**defaults, **value}`.
"""

from ._errors import WeirError
from ._runtime import _ABSENT, ListState, MapState, ValueState


def _split(stored):
    """A stored value's version and value."""
    if type(stored) is dict and len(stored) == 2 and "$version" in stored and "$value" in stored:
        return stored["$version"], stored["$value"]
    return 1, stored


def _check_version(name, version):
    if type(version) is not int or version < 1:
        raise WeirError(f"state `{name}`: a version is an integer from 1 up, not {version!r}")


def _migrated(name, declared, migrate, version, value):
    """`value`, stored at `version`, migrated to the `declared` version of state `name`."""
    if type(version) is not int or version > declared:
        raise WeirError(
            f"state `{name}`: the stored value is of version {version}, newer than "
            f"this operator's version {declared} of the state: it was written by a "
            "later version of the operator; run that version, or restore a checkpoint "
            "taken before it"
        )
    if migrate is None:
        raise WeirError(
            f"state `{name}`: the stored value is of version {version} and the state, "
            f"of version {declared}, declares no migration"
        )
    try:
        return migrate(version, value)
    except WeirError as e:
        raise WeirError(f"state `{name}`: migrating a value of version {version}: {e}") from None


class _Versioned:
    """What the versioned states share: the declared version, the migration, and reading and
    wrapping a stored value. Each state class names the two slots itself."""

    __slots__ = ()

    def _declare_version(self, name, version, migrate):
        _check_version(name, version)
        self.version = version
        self._migrate = migrate

    def _current(self, stored):
        """A decoded stored value in this version, and whether it was migrated."""
        version, value = _split(stored)
        if version == self.version:
            return value, False
        return _migrated(self.name, self.version, self._migrate, version, value), True

    def _wrapped(self, value):
        """`value` as stored in this version."""
        return {"$version": self.version, "$value": value} if self.version > 1 else value


class VersionedValueState(_Versioned, ValueState):
    """A `ValueState` whose values carry a version; see the module's documentation."""

    __slots__ = ("version", "_migrate")

    def __init__(self, name, version, migrate):
        self._declare_version(name, version, migrate)
        super().__init__(name)

    def _fetch(self):
        # No shortcut for plain integers: they are values of version 1, which may need
        # migrating.
        return self._fetch_items()

    def _read(self, slot):
        """The value of `slot`, not read yet in this batch, migrated if it is older."""
        # `ValueState._read` decodes and caches what is stored (no slot is decoded ahead of
        # it: `_fetch` takes no shortcut here); what it stored is then unwrapped.
        value = super()._read(slot)
        if value is _ABSENT:
            return value
        value, migrated = self._current(value)
        if migrated:
            # Written back in this version with the batch's writes, once.
            self._dirty[slot] = None
        self._cache[slot] = value
        return value

    def _flush_into(self, ops, data):
        if self.version > 1 and self._dirty:
            cache = self._cache
            for slot in self._dirty:
                value = cache[slot]
                if value is not _ABSENT:
                    cache[slot] = self._wrapped(value)
        super()._flush_into(ops, data)


class VersionedMapState(_Versioned, MapState):
    """A `MapState` whose values carry a version, as `VersionedValueState`'s do: a value of an
    older version is migrated as it is read (`get`, `items`) and put back in this version with
    the batch's writes. Keys have no version."""

    __slots__ = ("version", "_migrate")

    def __init__(self, name, version, migrate):
        self._declare_version(name, version, migrate)
        super().__init__(name)

    def _read(self, key, stored):
        value, migrated = self._current(stored)
        if migrated:
            self.put(key, value)
        return value

    def get(self, key, default=None):
        found = super().get(key, _ABSENT)
        return default if found is _ABSENT else self._read(key, found)

    def get_many(self, slots, keys, default=None):
        found = super().get_many(slots, keys, _ABSENT)
        for i, (slot, key, stored) in enumerate(zip(slots, keys, found)):
            if stored is _ABSENT:
                found[i] = default
                continue
            value, migrated = self._current(stored)
            if migrated:
                self._put_at(slot, key, self._wrapped(value))
            found[i] = value
        return found

    def put(self, key, value):
        super().put(key, self._wrapped(value))

    def items(self):
        return [(key, self._read(key, value)) for key, value in super().items()]


class VersionedListState(_Versioned, ListState):
    """A `ListState` whose items carry a version: a `get` that finds items of an older version
    migrates them and writes the whole list back in this version (a list is only ever cleared
    and appended to)."""

    __slots__ = ("version", "_migrate")

    def __init__(self, name, version, migrate):
        self._declare_version(name, version, migrate)
        super().__init__(name)

    def append(self, item):
        super().append(self._wrapped(item))

    def get(self):
        read = [self._current(stored) for stored in super().get()]
        items = [item for item, _ in read]
        if any(migrated for _, migrated in read):
            self.clear()
            for item in items:
                self.append(item)
        return items

    def get_many(self, slots):
        lists = []
        for slot, stored in zip(slots, super().get_many(slots)):
            read = [self._current(item) for item in stored]
            items = [item for item, _ in read]
            if any(migrated for _, migrated in read):
                self._rewrite_at(slot, [self._wrapped(item) for item in items])
            lists.append(items)
        return lists

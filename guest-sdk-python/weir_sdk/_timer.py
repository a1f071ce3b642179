"""Timer: a timer that fired, as `Operator.on_timer` gets it."""

class Timer:
    """A timer that fired, given to `Operator.on_timer`: `key` (`bytes`), `timestamp`
    (milliseconds), `tag` and `domain` (`"event"` or `"processing"`)."""

    __slots__ = ("key", "timestamp", "tag", "domain")

    def __init__(self, key, timestamp, tag=0, domain="event"):
        self.key = key
        self.timestamp = timestamp
        self.tag = tag
        self.domain = domain

    def key_str(self):
        """The key as text (UTF-8)."""
        return self.key.decode()

    def __repr__(self):
        return (
            f"Timer(key={self.key!r}, timestamp={self.timestamp!r}, tag={self.tag!r}, "
            f"domain={self.domain!r})"
        )

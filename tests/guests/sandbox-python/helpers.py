"""One of the probe's own modules, imported only inside `process`."""

SUFFIX = ""

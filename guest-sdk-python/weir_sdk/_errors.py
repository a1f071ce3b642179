"""WeirError: what the SDK raises, and what an operator raises to fail a record."""

class WeirError(Exception):
    """An error the SDK reports (bad batch, state misuse, a failed host call), or an operator
    raises. From `process_batch`, `record=i` tells the host that record `i` of the batch
    failed (`process` needs no index: the SDK knows which record it was handling)."""

    def __init__(self, message="", record=None):
        super().__init__(message)
        self.record = record

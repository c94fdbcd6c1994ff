"""How a source read fails, whichever reader runs it (`kafka_read`'s consumer or
`kafka_fetch`'s Fetch requests): both raise these, so neither imports the other's module."""

from __future__ import annotations


class DataLossError(RuntimeError):
    """Offsets the query needs were deleted (retention) or the partition went away."""


class ReadTimeoutError(RuntimeError):
    """The reader made no progress towards the end offset within the poll timeout."""

"""The optional C extension: `speedups` is `_speedups` when it is built, else None and every
caller takes its pure-Python path (the reference the C code is tested against)."""

from __future__ import annotations

from types import ModuleType

__all__ = ["speedups"]

speedups: ModuleType | None
try:
    from oncelog.protocol.records import _speedups as speedups
except ImportError:  # not built (pip install without a compiler, say)
    speedups = None

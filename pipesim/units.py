"""Unit conversion constants. Inside pipesim everything is seconds, bytes, bytes/s and FLOP.

File formats and the CLI may speak ms, GiB, GB/s or Gb/s when the key or flag says so; they
convert once, at the edge, with these constants. This module imports nothing from pipesim.
"""

from __future__ import annotations

__all__ = ["GB", "GBIT", "GIB", "GIGA", "KIB", "MB", "MIB", "MS", "TERA", "US"]

MS = 1e-3
"""Seconds in a millisecond."""
US = 1e-6
"""Seconds in a microsecond."""
KIB = 1024
"""Bytes in a kibibyte."""
MIB = 1024**2
"""Bytes in a mebibyte."""
GIB = 1024**3
"""Bytes in a gibibyte."""
MB = 1e6
"""Bytes in a megabyte (decimal)."""
GB = 1e9
"""Bytes in a gigabyte (decimal), as in link and memory bandwidths (GB/s)."""
GBIT = 1e9 / 8
"""Bytes in a gigabit (decimal), as in network line rates (Gb/s)."""
GIGA = 1e9
TERA = 1e12

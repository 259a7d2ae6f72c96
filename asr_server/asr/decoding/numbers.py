"""Numbers that arrive as request or config parameters: parsed once, refused unless finite and in range.

A NaN or infinite score reaching the compiled search would poison every comparison it takes part in, and
1e300 overflows to infinity once summed; both are refused here, where the parameter is read, with a message
that names it.
"""

from __future__ import annotations

import math
from typing import Any


def bounded_float(value: Any, name: str, low: float, high: float) -> float:
    """``value`` (a number or its text) as a float in [low, high]; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {str(value)[:50]!r}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}], got {str(value)[:50]!r}")
    return number

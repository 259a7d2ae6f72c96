"""The one reading of a yes/no parameter, for config parameters (always strings) and request parameters (a
bool, or a string such as "1" or "true"): "1", "true" and "yes" in any case, or True, are yes; all else is no."""

from __future__ import annotations

from typing import Any

YES = ("1", "true", "yes")


def truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in YES

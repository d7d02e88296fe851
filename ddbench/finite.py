"""Numbers read from a file or an option: finite and in range, or an InputError naming where (pure).

Python's JSON reader takes `NaN`, `Infinity` and `1e400` as floats, and click's float ranges let NaN
through (every comparison with NaN is false), so a NaN limit or baseline figure used to turn a gate off
silently. Every reader that takes numbers from a user goes through here, with one wording.
"""

from __future__ import annotations

import math
from typing import Any


def nonfinite_path(value: Any) -> tuple[str, float] | None:
    """(JSON path, value) of the first NaN or infinite float in a parsed document, or None.

    Walked without recursion, so a deep document costs no stack; the path reads `cases.<id>.modeled_us`,
    `cases[0].pairs[1].figures.max_row_ulp`.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, item
        if isinstance(item, dict):
            stack += reversed([(f"{path}.{k}" if path else str(k), v) for k, v in item.items()])
        elif isinstance(item, list):
            stack += reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)])
    return None


def number_problem(
    value: Any,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
) -> str | None:
    """Why `value` is not a usable number (a bool is not one), or None when it is."""
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        return f"must be {kind} (got {type(value).__name__} {value!r:.40})"
    if not math.isfinite(value):
        return f"is {value}, not a finite number"
    if minimum is not None and value < minimum:
        return f"is {value:g}; it must be at least {minimum:g}"
    if above is not None and value <= above:
        return f"is {value:g}; it must be above {above:g}"
    if maximum is not None and value > maximum:
        return f"is {value:g}; it must be at most {maximum:g}"
    return None

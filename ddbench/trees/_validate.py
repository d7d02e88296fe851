"""Checks of generator arguments, so every bad value becomes a TreeSpecError that names its spec field."""

from __future__ import annotations

import numbers

from ddbench.errors import TreeSpecError


def int_arg(value: object, field: str, *, lo: int, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi]; `field` is the spec field blamed when it is not.

    bool is rejected although it is an int subclass: `"budget": true` in a suite is a typo, not 1.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TreeSpecError(f"must be an integer, got {value!r}", path=field)
    number = int(value)
    if number < lo:
        raise TreeSpecError(f"must be at least {lo}, got {number}", path=field)
    if hi is not None and number > hi:
        raise TreeSpecError(f"must be at most {hi}, got {number}", path=field)
    return number


def check_q_len(q_len: int, field: str, limit: int, what: str) -> int:
    """Reject a tree larger than the verify step supports, blaming the field that sets its size."""
    if q_len > limit:
        raise TreeSpecError(f"{what} gives q_len {q_len}, above the limit of {limit}", path=field)
    return q_len

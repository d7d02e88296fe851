"""Named sets of parity bounds, defined once: a suite's `parity` list names a set instead of pasting it.

The shipped suites judge the same roles the same way (the project kernel, the emulation of it, a user's
plug-in judged as `candidate`); pasted per file, their limits drifted. A set is plain suite JSON, so it
goes through the same checks as a bound written inline.
"""

from __future__ import annotations

from typing import Any

_NO_WORSE_THAN_TRITON = {"no_worse_than": "triton", "margin_row_ulp": 1.0}

BOUND_SETS: dict[str, tuple[dict[str, Any], ...]] = {
    # SGLang's Triton kernel against the exact truth: it lands within ~1.9 row-scaled ULPs of it.
    "triton": (
        {"candidate": "triton", "against": "reference-fp64", "max_row_ulp": 3.0, "mean_row_ulp": 0.4},
    ),
    # The project kernel under the CPU emulation: tighter than Triton, no uniform bias, never worse than it.
    "cuda-emu": (
        {
            "candidate": "cuda-emu",
            "against": "reference-fp64",
            "max_row_ulp": 1.5,
            "mean_row_ulp": 0.2,
            "abs_gain": 0.25,
            "max_channel_ulp": 1.5,
            **_NO_WORSE_THAN_TRITON,
        },
        {"candidate": "cuda-emu", "against": "triton", "max_row_ulp": 3.0, "mean_row_ulp": 0.4},
    ),
    # The project kernel on a GPU (its own reductions in another order: a little more room). The channel
    # limit is the emulation's plus the same 0.5 of room; no GPU has measured it yet.
    "cuda": (
        {
            "candidate": "cuda",
            "against": "reference-fp64",
            "max_row_ulp": 2.0,
            "mean_row_ulp": 0.2,
            "max_channel_ulp": 2.0,
            **_NO_WORSE_THAN_TRITON,
        },
        {"candidate": "cuda", "against": "triton", "max_row_ulp": 4.0, "mean_row_ulp": 0.4},
    ),
    # A user's kernel plugged in `--as candidate`: a kernel as exact as Triton passes.
    "candidate": (
        {"candidate": "candidate", "against": "reference-fp64", "max_row_ulp": 4.0, **_NO_WORSE_THAN_TRITON},
        {"candidate": "candidate", "against": "triton", "max_row_ulp": 3.0, "mean_row_ulp": 0.4},
    ),
}


def expand_bound_sets(specs: list[Any]) -> list[dict[str, Any]]:
    """The bounds with every set name replaced by its bounds (the schema admits only the names here)."""
    bounds: list[dict[str, Any]] = []
    for spec in specs:
        bounds += [dict(b) for b in BOUND_SETS[spec]] if isinstance(spec, str) else [spec]
    return bounds

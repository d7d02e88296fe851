"""How many cases a suite document expands to, counted from its matrices before anything is expanded.

A 1.4 KB file whose matrix lists ten fields of five values is 10^7 cases: expanding it first would take
gigabytes and minutes before saying no. Counting is a product of list lengths per entry, so a suite over
the limit is refused in microseconds. A capture reference counts as one case here; the loader refuses a
folder of more files than the limit before reading any, and parse_suite stops when the total passes it.
"""

from __future__ import annotations

import math
from typing import Any

from ddbench.errors import InputError

DEFAULT_MAX_CASES = 10_000  # ten times the largest shipped suite; raise with --max-cases N / max_cases=N
RAISE_WITH = "raise the limit with --max-cases N (max_cases=N from Python)"


def entry_case_counts(document: dict[str, Any]) -> list[tuple[str, int]]:
    """(JSON path of the entry's matrix, or of the entry without one; its case count), in expansion order."""
    entries = [("", document)] if "matrix" in document else []
    entries += [(f"cases[{i}]", entry) for i, entry in enumerate(document.get("cases", []))]
    default_calls = _calls(document.get("defaults", {}).get("sglang_buffers"))
    counts = []
    for at, entry in entries:
        matrix = entry.get("matrix") or {}
        calls = _calls(entry["sglang_buffers"]) if "sglang_buffers" in entry else default_calls
        if "sglang_buffers" in matrix:
            calls = max(map(_calls, matrix["sglang_buffers"]), default=1)
        if matrix:
            counts.append(
                (f"{at}.matrix" if at else "matrix", calls * math.prod(len(v) for v in matrix.values()))
            )
        else:
            counts.append((at, calls))
    return counts


def _calls(buffers: Any) -> int:
    """Cases one point of an entry becomes: a CUDA-graph group is its first call and each replay."""
    replays = buffers.get("replay_prefix", []) if isinstance(buffers, dict) else []
    return 1 + len(replays) if isinstance(replays, list) else 1


def check_case_count(document: dict[str, Any], file: str, max_cases: int) -> None:
    """InputError naming the entry that takes the suite past `max_cases` (after the schema check)."""
    counts = entry_case_counts(document)
    total = sum(n for _, n in counts)
    if total <= max_cases:
        return
    at, largest = max(counts, key=lambda item: item[1])
    share = "" if largest == total else f" ({at} alone gives {largest})"
    raise InputError(
        f"the suite expands to {total} cases{share}, above the limit of {max_cases} per suite file; "
        f"split the matrix or {RAISE_WITH}",
        file=file,
        path=at,
    )


def too_many_cases(count: int, max_cases: int, file: str, where: str) -> InputError:
    """The same refusal once capture folders have been counted file by file."""
    return InputError(
        f"the suite expands to more than {max_cases} cases (capture files count one each, {count} so far), "
        f"above the limit of {max_cases} per suite file; {RAISE_WITH}",
        file=file,
        path=where,
    )

"""Compare latency between two sources — baseline files or results files — case by case (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddbench.errors import InputError
from ddbench.metrics.latency_verdict import regression
from ddbench.timing.stats import LatencyStats

Table = dict[tuple[str, str], LatencyStats]  # (case ID, backend) -> stats


def latency_table_of(document: dict[str, Any], source: str) -> Table:
    """From a baseline file's entries, or from a results file's timed cases."""
    try:
        return _latency_table(document)
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"malformed latency data: {err}", file=source) from None


def _latency_table(document: Any) -> Table:
    fmt = document.get("format") if isinstance(document, dict) else None
    out: Table = {}
    if fmt == "ddbench-baseline":
        for case_id, backends in document.get("entries", {}).items():
            for name, entry in backends.items():
                out[(case_id, name)] = LatencyStats.from_json(entry["latency"])
    elif fmt == "ddbench-results":
        for case in document.get("cases", []):
            for name, data in ((case.get("latency") or {}).get("backends") or {}).items():
                out[(case["id"], name)] = LatencyStats.from_json(data)
    else:
        raise ValueError('neither a baseline file nor a results file (no known "format")')
    return out


@dataclass(frozen=True)
class Change:
    case: str
    backend: str
    before: LatencyStats | None
    after: LatencyStats | None
    regressed: bool = False
    improved: bool = False

    @property
    def change(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after.median_us / self.before.median_us - 1.0


def compare_tables(before: Table, after: Table, tolerance: float) -> list[Change]:
    changes = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        regressed = improved = False
        if a is not None and b is not None:
            regressed, _, _ = regression(a, b, tolerance)
            improved, _, _ = regression(b, a, tolerance)
        changes.append(Change(key[0], key[1], b, a, regressed, improved))
    return changes

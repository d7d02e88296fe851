"""Compare latency between two sources — baseline files or results files — case by case (pure).

Every figure is checked on the way in (finite, positive, in order), and a comparison of medians that cannot be
divided is refused rather than printed as "+nan%" or raised as ZeroDivisionError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddbench.baselines.checked_latency import checked_latency, comparable
from ddbench.baselines.store import FORMAT as BASELINE_FORMAT
from ddbench.baselines.store import baseline_from_json
from ddbench.errors import InputError
from ddbench.metrics.latency_verdict import regression
from ddbench.timing.stats import LatencyStats

RESULTS_FORMAT = "ddbench-results"

Table = dict[tuple[str, str], LatencyStats]  # (case ID, backend) -> stats


def latency_table_of(document: dict[str, Any], source: str) -> Table:
    """From a baseline file's entries or a results file's timed cases; InputError names file and field."""
    fmt = document.get("format") if isinstance(document, dict) else None
    if fmt == BASELINE_FORMAT:
        baseline = baseline_from_json(document, source)
        return {
            (case_id, name): entry.latency
            for case_id, backends in baseline.entries.items()
            for name, entry in backends.items()
        }
    if fmt == RESULTS_FORMAT:
        return _results_table(document, source)
    raise InputError('neither a baseline file nor a results file (no known "format")', file=source)


def _results_table(document: dict[str, Any], source: str) -> Table:
    out: Table = {}
    cases = document.get("cases")
    if not isinstance(cases, list):
        raise InputError("must be a list of case results", file=source, path="cases")
    for i, case in enumerate(cases):
        latency = case.get("latency") if isinstance(case, dict) else None
        backends = latency.get("backends") if isinstance(latency, dict) else None
        if not backends:
            continue
        case_id = case.get("id")
        if not isinstance(case_id, str) or not isinstance(backends, dict):
            raise InputError(
                "a case result needs an id and latency.backends", file=source, path=f"cases[{i}]"
            )
        for name, data in backends.items():
            try:
                out[(case_id, name)] = checked_latency(data)
            except ValueError as err:
                where = f"cases[{i}].latency.backends.{name}"
                raise InputError(f"not usable latency: {err}", file=source, path=where) from None
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
    """One Change per (case, backend) in either table; ValueError for a median that cannot be compared."""
    changes = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        for stats in (s for s in (b, a) if s is not None):
            if not comparable(stats):
                raise ValueError(
                    f"{key[0]} {key[1]}: median {stats.median_us!r} us (noise {stats.rel_noise!r}) cannot be "
                    "compared; a median must be finite and positive"
                )
        regressed = improved = False
        if a is not None and b is not None:
            regressed, _, _ = regression(a, b, tolerance)
            improved, _, _ = regression(b, a, tolerance)
        changes.append(Change(key[0], key[1], b, a, regressed, improved))
    return changes

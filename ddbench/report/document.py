"""A results document built in memory, shaped like the results file (for reports of runs without --json)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ddbench.runner.results import CaseResult

FORMAT = "ddbench-results"
FORMAT_VERSION = 1


def summary_of(cases: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Cases per status, as the results file's `summary` counts them."""
    return dict(Counter(c["status"] for c in cases))


def results_document(
    results: Sequence[CaseResult], suites: list[str], environment: dict[str, Any], complete: bool = True
) -> dict[str, Any]:
    cases = [r.to_json() for r in results]
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "started": now,
        "finished": now if complete else None,
        "complete": complete,
        "suites": suites,
        "environment": environment,
        "summary": summary_of(cases),
        "cases": cases,
    }

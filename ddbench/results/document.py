"""The run document: what a results file holds, built in one place (the file, reports and merge all use it).

Its verdict is also decided here, once: a run passed only if it finished, nothing failed, and something was
judged — a run in which every case was skipped did not pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from ddbench.metrics.status import Status
from ddbench.results.case_result import CaseResult

FORMAT = "ddbench-results"
FORMAT_VERSION = 1


def summary_of(cases: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Cases per status, as the results file's `summary` counts them."""
    return dict(Counter(str(c["status"]) for c in cases))


def run_verdict(summary: Mapping[str, int], complete: bool) -> str:
    """`failed`, `incomplete`, `nothing judged` or `passed`: the one word every report leads with."""
    if summary.get(Status.FAIL, 0) or summary.get(Status.ERROR, 0):
        return "failed"
    if not complete:
        return "incomplete"
    if not summary.get(Status.PASS, 0):
        return "nothing judged"
    return "passed"


_COUNTED = (
    (Status.PASS, "passed"),
    (Status.FAIL, "failed"),
    (Status.ERROR, "errors"),
    (Status.SKIPPED, "skipped"),
)


def counts_text(summary: Mapping[str, int]) -> str:
    """`2 passed, 1 failed, 0 errors, 3 skipped` (cases)."""
    return ", ".join(f"{summary.get(status.value, 0)} {word}" for status, word in _COUNTED)


def results_document(
    results: Sequence[CaseResult],
    suites: list[str],
    environment: dict[str, Any],
    complete: bool = True,
    shard: str | None = None,
    selection: str | None = None,
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
        "shard": shard,
        "filter": selection,
        "environment": environment,
        "summary": summary_of(cases),
        "cases": cases,
    }

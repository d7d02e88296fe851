"""`--ddbench-json PATH` under pytest and pytest-xdist: each process writes its part, the controller merges.

Without xdist the one process writes PATH itself. Under xdist each worker writes `PATH.<worker>.part.json`
and the controller (which runs no test) merges the parts into PATH, then removes them. A case whose tests
went to two workers was judged on both from the same seeded inputs: it is kept once when both agree, and
the merge is refused (the parts stay, nothing is lost) when they do not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ddbench.atomic import check_writable, write_json_atomic
from ddbench.environment import environment
from ddbench.errors import InputError
from ddbench.results.document import summary_of
from ddbench.results.merge import merge_results
from ddbench.results.read import read_results
from ddbench.runner.sinks import ResultsFileSink, RunFacts, Sink

PART_SUFFIX = ".part.json"


def _worker(config: pytest.Config) -> str | None:
    return getattr(config, "workerinput", {}).get("workerid")


def _parts(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.gw*{PART_SUFFIX}"))


def results_sinks(config: pytest.Config, suites: Sequence[str]) -> list[Sink]:
    option = config.getoption("ddbench_json")
    if not option:
        return []
    path = Path(option)
    worker = _worker(config)
    if worker is None:
        check_writable(path, "--ddbench-json", inputs=suites)
        for stale in _parts(path):  # parts of an earlier run must not join this one's merge
            stale.unlink()
        if _running_workers(config):
            return []  # the controller runs no test: it only merges
        return [ResultsFileSink(path, RunFacts(list(suites), environment()))]
    part = path.with_name(f"{path.name}.{worker}{PART_SUFFIX}")
    return [ResultsFileSink(part, RunFacts(list(suites), environment()))]


def _running_workers(config: pytest.Config) -> bool:
    """The xdist controller (`-n N` given, not a worker): xdist registers its session plugin too late."""
    workers = getattr(config.option, "numprocesses", None)
    return _worker(config) is None and bool(workers)


def merge_worker_results(config: pytest.Config) -> None:
    option = config.getoption("ddbench_json")
    if not option or _worker(config) is not None or not _running_workers(config):
        return
    path = Path(option)
    parts = _parts(path)
    if not parts:
        return
    merged = merge_results(_judged_once([(str(p), read_results(p)) for p in parts]))
    merged["shards"] = [dict(s, file=os.path.basename(s["file"])) for s in merged["shards"]]
    write_json_atomic(path, merged)
    for part in parts:
        part.unlink()


def _judged_once(parts: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Drop the second copy of a case two workers both judged, if both reached the same statuses."""
    first: dict[str, tuple[str, Any]] = {}
    out = []
    for file, document in parts:
        kept = []
        for case in document["cases"]:
            verdict = (case["status"], [p["status"] for p in case["pairs"]])
            if case["id"] not in first:
                first[case["id"]] = (file, verdict)
                kept.append(case)
            elif first[case["id"]][1] != verdict:
                raise InputError(
                    f"case {case['id']} was judged differently by two workers: {first[case['id']][1]} in "
                    f"{first[case['id']][0]}, {verdict}; the parts are kept",
                    file=file,
                )
        out.append((file, {**document, "cases": kept, "summary": summary_of(kept)}))
    return out

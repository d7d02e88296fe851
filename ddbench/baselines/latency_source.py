"""What `baseline diff` compares: a baseline file or a results file, with the device and suites it is of.

Both kinds are checked before use (a baseline field by field, a results file against the results schema), and
two sources of different devices or suites are refused unless the user says the comparison is meant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.baselines.compare import RESULTS_FORMAT, Table, latency_table_of
from ddbench.baselines.device import device_key_from_facts
from ddbench.baselines.results_input import read_results
from ddbench.baselines.store import FORMAT as BASELINE_FORMAT
from ddbench.baselines.store import baseline_from_json, read_json_bounded
from ddbench.errors import InputError


@dataclass(frozen=True)
class LatencySource:
    file: str
    kind: str  # "baseline" or "results"
    device: str
    suites: frozenset[str]  # suite names (a results file may hold several)
    table: Table

    def describe(self) -> str:
        return f"device {self.device} / suite {', '.join(sorted(self.suites)) or '(none)'}"


def read_latency_source(path: Path) -> LatencySource:
    """A checked baseline or results file; InputError (exit 2) naming the file for anything else."""
    document = read_json_bounded(path)
    fmt = document.get("format") if isinstance(document, dict) else None
    if fmt == BASELINE_FORMAT:
        baseline = baseline_from_json(document, str(path))
        table = latency_table_of(document, str(path))
        return LatencySource(str(path), "baseline", baseline.device, frozenset([baseline.suite]), table)
    if fmt == RESULTS_FORMAT:
        results = read_results(path)  # the schema check: a malformed results file stops here
        return LatencySource(
            str(path),
            "results",
            results_device(results),
            results_suites(results),
            latency_table_of(results, str(path)),
        )
    raise InputError(
        f'neither a baseline file ("format": "{BASELINE_FORMAT}") '
        f'nor a results file ("format": "{RESULTS_FORMAT}")',
        file=str(path),
    )


def results_device(results: dict[str, Any]) -> str:
    """The device key of the machine that measured (recorded in the file), not of the one reading it."""
    return device_key_from_facts(results["environment"]["device"])


def results_suites(results: dict[str, Any]) -> frozenset[str]:
    return frozenset(case["case"]["suite"] for case in results["cases"])


def check_same_origin(before: LatencySource, after: LatencySource) -> None:
    """InputError when the two were measured on different devices or for different suites."""
    if before.device != after.device or before.suites != after.suites:
        raise InputError(
            f"{before.file} is for {before.describe()}, {after.file} is for {after.describe()}: "
            "their latencies are not comparable (--allow-mismatch compares them anyway)"
        )

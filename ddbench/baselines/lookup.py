"""The stored baselines a run judges against: one file per suite on this device, loaded once."""

from __future__ import annotations

from pathlib import Path

from ddbench.baselines.store import BaselineFile, baseline_path, load_baseline
from ddbench.suite.model import Case
from ddbench.timing.stats import LatencyStats


class BaselineSet:
    def __init__(self, device: str, override: Path | None = None) -> None:
        self.device, self.override = device, override
        self._files: dict[str, BaselineFile | None] = {}

    def file(self, suite: str) -> BaselineFile | None:
        if suite not in self._files:
            self._files[suite] = load_baseline(self.override or baseline_path(self.device, suite))
        return self._files[suite]

    def latency(self, case: Case) -> dict[str, LatencyStats]:
        """Baseline latency of each backend stored for this case (none when the workload changed)."""
        baseline = self.file(case.suite)
        if baseline is None:
            return {}
        stored = baseline.entries.get(case.id, {})
        return {name: stats for name in stored if (stats := baseline.latency(case.id, name)) is not None}

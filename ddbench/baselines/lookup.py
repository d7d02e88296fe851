"""The stored baselines a run judges against: one file per suite on this device, loaded once.

A file of another device or suite (`run --baseline FILE` names any file) is refused, not used; an entry
whose workload hash differs from the case's was measured on another workload and is not used either. An
entry timed in another mode (a warm graph against a cold-L2 run) is dropped where the run's own mode is known,
after timing (runner/timing.py).
"""

from __future__ import annotations

from pathlib import Path

from ddbench.baselines.entry import BaselineEntry
from ddbench.baselines.store import DEFAULT_ROOT, BaselineFile, baseline_path, load_baseline
from ddbench.suite.ids import workload_hash
from ddbench.suite.model import Case


class BaselineSet:
    def __init__(self, device: str, override: Path | None = None, root: Path = DEFAULT_ROOT) -> None:
        self.device, self.override, self.root = device, override, root
        self._files: dict[str, BaselineFile | None] = {}

    def file(self, suite: str) -> BaselineFile | None:
        """The suite's baseline on this device; InputError when the file is of another device or suite."""
        if suite not in self._files:
            path = self.override or baseline_path(self.device, suite, self.root)
            self._files[suite] = load_baseline(path, device=self.device, suite=suite)
        return self._files[suite]

    def entries(self, case: Case) -> dict[str, BaselineEntry]:
        """The baseline entry of each backend stored for this case (none when the workload changed)."""
        baseline = self.file(case.suite)
        if baseline is None:
            return {}
        stored = baseline.entries.get(case.id, {})
        current = workload_hash(case)
        return {
            name: entry
            for name, entry in stored.items()
            if entry.case_hash is None or entry.case_hash == current
        }

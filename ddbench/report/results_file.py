"""The JSON results file, rewritten atomically after every case so a crash loses no finished case."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.runner.results import CaseResult

FORMAT = "ddbench-results"
FORMAT_VERSION = 1


class ResultsFile:
    def __init__(self, path: str | Path, suites: list[str], environment: dict[str, Any]) -> None:
        self.path = Path(path)
        self.document: dict[str, Any] = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "finished": None,
            "complete": False,
            "suites": suites,
            "environment": environment,
            "summary": {},
            "cases": [],
        }
        self._write()

    def add(self, result: CaseResult) -> None:
        self.document["cases"].append(result.to_json())
        self.document["summary"] = dict(Counter(c["status"] for c in self.document["cases"]))
        self._write()

    def finish(self) -> None:
        self.document["complete"] = True
        self.document["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._write()

    def _write(self) -> None:
        write_json_atomic(self.path, self.document)

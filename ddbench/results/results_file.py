"""The JSON results file, rewritten atomically after every case so a crash loses no finished case."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.results.case_result import CaseResult
from ddbench.results.document import results_document, summary_of


class ResultsFile:
    def __init__(
        self,
        path: str | Path,
        suites: list[str],
        environment: dict[str, Any],
        shard: str | None = None,
        selection: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.document = results_document([], suites, environment, False, shard, selection)
        self._write()

    def add(self, result: CaseResult) -> None:
        self.document["cases"].append(result.to_json())
        self.document["summary"] = summary_of(self.document["cases"])
        self._write()

    def finish(self) -> None:
        self.document["complete"] = True
        self.document["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._write()

    def _write(self) -> None:
        write_json_atomic(self.path, self.document)

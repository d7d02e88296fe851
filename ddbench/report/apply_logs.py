"""Read the serving plugin's JSON-lines logs (one per TP rank and process) into one summary per process.

A log is appended a line at a time, so a process killed mid-write leaves at most its last line cut short:
that line is skipped and said. Any other line that is not a JSON object with an `event` is an error naming
the file and the line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbench.bounded_read import read_regular_file, size_limit
from ddbench.errors import InputError
from ddbench.serving.apply_log import LOG_PREFIX, LOG_SUFFIX

MAX_LOG_BYTES = 256 << 20
MAX_LOG_BYTES_ENV = "DDBENCH_MAX_APPLY_LOG_BYTES"


@dataclass
class ProcessSummary:
    """One process's log: its last counters line, its breaches, and what it said about itself."""

    file: str
    rank: int | None = None
    pid: int | None = None
    mode: str = "?"
    backend: str = "?"
    counters: dict[str, Any] = field(default_factory=dict)
    tripped: bool = False
    unavailable: str | None = None
    breaches: list[dict[str, Any]] = field(default_factory=list)
    cut_last_line: bool = False

    def count(self, name: str) -> int:
        value = self.counters.get(name, 0)
        return sum(value.values()) if isinstance(value, dict) else int(value)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "rank": self.rank,
            "pid": self.pid,
            "mode": self.mode,
            "backend": self.backend,
            "counters": self.counters,
            "tripped": self.tripped,
            "unavailable": self.unavailable,
            "breaches": self.breaches,
            "cut_last_line": self.cut_last_line,
        }


def log_files(paths: list[str]) -> list[Path]:
    """The logs named, folders expanded to their apply-*.jsonl files."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob(f"{LOG_PREFIX}*{LOG_SUFFIX}"))
            if not found:
                raise InputError(f"holds no {LOG_PREFIX}*{LOG_SUFFIX} log", file=name)
            files += found
        else:
            files.append(path)
    return files


def read_apply_log(path: Path) -> ProcessSummary:
    data = read_regular_file(
        path,
        what="apply log",
        max_bytes=size_limit(os.environ, MAX_LOG_BYTES_ENV, MAX_LOG_BYTES),
        raise_with=f"set {MAX_LOG_BYTES_ENV}, e.g. {MAX_LOG_BYTES_ENV}=1G, to raise it",
        missing="no such apply log",
    )
    summary = ProcessSummary(file=str(path))
    lines = data.split(b"\n")
    complete = lines[:-1]  # the text after the last newline is a line still being written, or nothing
    if lines[-1].strip():
        summary.cut_last_line = True
    for number, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise InputError("is not JSON", file=str(path), path=f"line {number}") from None
        if not isinstance(record, dict) or not isinstance(record.get("event"), str):
            raise InputError(
                "is not an apply-log record (a JSON object with an event)",
                file=str(path),
                path=f"line {number}",
            )
        _take(summary, record)
    return summary


def _take(summary: ProcessSummary, record: dict[str, Any]) -> None:
    event = record["event"]
    for key in ("pid", "mode", "backend"):
        if record.get(key) is not None:
            setattr(summary, key, record[key])
    rank = record.get("tp_rank", record.get("rank"))
    if isinstance(rank, int):
        summary.rank = rank
    if event == "counters":
        summary.counters = {
            k: v for k, v in record.items() if k not in ("event", "time", "pid", "rank", "mode", "backend")
        }
        summary.tripped = bool(record.get("tripped"))
    elif event == "breach":
        summary.breaches.append(record)
        summary.tripped = True
    elif event == "unavailable":
        summary.unavailable = str(record.get("reason"))


def read_apply_logs(paths: list[str]) -> list[ProcessSummary]:
    """Every process's summary, by rank then pid."""
    summaries = [read_apply_log(path) for path in log_files(paths)]
    return sorted(summaries, key=lambda s: (s.rank is None, s.rank or 0, s.pid or 0))

"""The plugin's JSON-lines log: one file per process (`apply-r{rank}-p{pid}.jsonl`), one JSON object a line.

Each line is appended with a single write to a file opened O_APPEND, so a crash loses at most the line
being written and never garbles an earlier one. Nothing here raises into the server: a line that cannot
be written (a full disk, a missing permission) is counted, and said once on the `ddbench.serving` logger.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("ddbench.serving")

LOG_PREFIX = "apply-"
LOG_SUFFIX = ".jsonl"


def log_name(rank: int | None, pid: int) -> str:
    return f"{LOG_PREFIX}r{'x' if rank is None else rank}-p{pid}{LOG_SUFFIX}"


class ApplyLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path: Path | None = None
        self.failures = 0
        self._lock = threading.Lock()

    def open(self, rank: int | None) -> None:
        """Name the file once the rank is known (SGLang sets up TP after the plugin loads)."""
        if self.path is None:
            self.path = self.directory / log_name(rank, os.getpid())

    def write(self, event: str, **fields: Any) -> bool:
        """Append one line; False (counted, said once) when it could not be written."""
        record = {"event": event, "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}
        record.update(fields)
        try:
            line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
            with self._lock:
                if self.path is None:
                    self.open(None)
                assert self.path is not None
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    written = os.write(fd, line)
                finally:
                    os.close(fd)
                if written != len(line):
                    raise OSError(f"wrote {written} of {len(line)} bytes")
            return True
        except Exception as err:
            self.failures += 1
            if self.failures == 1:
                log.error(
                    "ddbench apply: cannot write the log %s: %s: %s; serving goes on, later failures are "
                    "only counted",
                    self.path,
                    type(err).__name__,
                    err,
                )
            return False

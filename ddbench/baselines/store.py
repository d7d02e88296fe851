"""Baseline files: `baselines/<device>/<suite>.json`, written atomically with stable key order so that a
baseline change reviews as a small diff.

Entry (per case ID, then backend): the latency statistics (no raw samples), the parity figures of the pairs
the backend was judged in, the case's workload hash, the kernel-source hash (for the custom kernel's
backends), the environment, the date and the git commit it was measured at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbench.atomic import write_atomic
from ddbench.errors import InputError
from ddbench.timing.stats import LatencyStats

FORMAT = "ddbench-baseline"
FORMAT_VERSION = 1
DEFAULT_ROOT = Path("baselines")


def baseline_path(device: str, suite: str, root: Path = DEFAULT_ROOT) -> Path:
    return root / device / f"{suite}.json"


@dataclass
class BaselineFile:
    device: str
    suite: str
    entries: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # case ID -> backend -> entry

    def latency(self, case_id: str, backend: str) -> LatencyStats | None:
        entry = self.entries.get(case_id, {}).get(backend)
        return LatencyStats.from_json(entry["latency"]) if entry else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "device": self.device,
            "suite": self.suite,
            "entries": self.entries,
        }


def load_baseline(path: Path) -> BaselineFile | None:
    """None when there is no file; InputError naming the file when it is not a baseline."""
    if not path.exists():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a readable baseline: {err}", file=str(path)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(f'not a baseline file (expected "format": "{FORMAT}")', file=str(path))
    if document.get("version") != FORMAT_VERSION:
        raise InputError(
            f"baseline format version {document.get('version')} is not {FORMAT_VERSION}", file=str(path)
        )
    for key in ("device", "suite"):
        if not isinstance(document.get(key), str):
            raise InputError("missing or not a string", file=str(path), path=key)
    entries = document.get("entries", {})
    if not isinstance(entries, dict):
        raise InputError("must be an object of case IDs", file=str(path), path="entries")
    for case_id, backends in entries.items():
        for name, entry in (backends or {}).items() if isinstance(backends, dict) else [(None, None)]:
            where = f"entries.{case_id}" + (f".{name}" if name else "")
            try:
                LatencyStats.from_json(entry["latency"])
            except (KeyError, TypeError, ValueError) as err:
                raise InputError(f"not a baseline entry: {err}", file=str(path), path=where) from None
    return BaselineFile(document["device"], document["suite"], entries)


def save_baseline(path: Path, baseline: BaselineFile) -> None:
    write_atomic(path, json.dumps(baseline.to_json(), indent=2, sort_keys=True) + "\n")

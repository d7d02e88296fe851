"""Baseline files: `baselines/<device>/<suite>.json`, written atomically with stable key order so that a
baseline change reviews as a small diff.

Entry (per case ID, then backend): the latency statistics (no raw samples), the parity figures of the pairs
the backend was judged in, the case's workload hash, the kernel-source hash (for the custom kernel's
backends), the environment, the date and the git commit it was measured at.

A baseline belongs to one device and one suite: loading it for another is refused, never used silently.
Updates go through `update_baseline`, which merges under a lock so that two concurrent updates both survive.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbench.atomic import write_atomic
from ddbench.baselines.entry import BaselineEntry, EntryProblem
from ddbench.baselines.file_lock import exclusive_lock
from ddbench.errors import InputError
from ddbench.suite.load import refuse_nonfinite
from ddbench.timing.stats import LatencyStats

FORMAT = "ddbench-baseline"
FORMAT_VERSION = 1
DEFAULT_ROOT = Path("baselines")
MAX_BASELINE_BYTES = 256 * 1024 * 1024  # summaries only, no raw samples: far above any real suite's file

Entries = dict[str, dict[str, BaselineEntry]]  # case ID -> backend -> entry
_TOP_LEVEL = ("format", "version", "device", "suite", "entries")


def baseline_path(device: str, suite: str, root: Path = DEFAULT_ROOT) -> Path:
    return root / device / f"{suite}.json"


@dataclass
class BaselineFile:
    device: str
    suite: str
    entries: Entries = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # top-level fields this version does not know, kept

    def entry(self, case_id: str, backend: str) -> BaselineEntry | None:
        return self.entries.get(case_id, {}).get(backend)

    def latency(self, case_id: str, backend: str) -> LatencyStats | None:
        entry = self.entry(case_id, backend)
        return entry.latency if entry else None

    def copy(self) -> BaselineFile:
        """A copy whose entry tables can change without touching this one (the entries are frozen)."""
        entries = {c: dict(b) for c, b in self.entries.items()}
        return BaselineFile(self.device, self.suite, entries, dict(self.extra))

    def to_json(self) -> dict[str, Any]:
        return self.extra | {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "device": self.device,
            "suite": self.suite,
            "entries": {
                case_id: {name: entry.to_json() for name, entry in backends.items()}
                for case_id, backends in self.entries.items()
            },
        }


def read_json_bounded(path: Path, limit: int = MAX_BASELINE_BYTES) -> Any:
    """The parsed file, or InputError: regular files only, size checked before reading, no traceback."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError("is not a regular file", file=str(path))
    if info.st_size > limit:
        raise InputError(f"is {info.st_size} bytes, over the {limit} byte limit", file=str(path))
    try:
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
        document = json.loads(raw.decode("utf-8"))
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", file=str(path)) from None
    except json.JSONDecodeError as err:
        raise InputError(
            f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", file=str(path)
        ) from None
    except (
        ValueError,
        RecursionError,
    ) as err:  # a 5000-digit integer; nesting deeper than the parser's stack
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:200]
        raise InputError(f"not usable JSON: {reason}", file=str(path)) from None
    refuse_nonfinite(document, str(path))
    return document


def baseline_from_json(document: Any, file: str) -> BaselineFile:
    """Every field checked; InputError names the file and the JSON path (entries.<case>.<backend>.<field>)."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(f'not a baseline file (expected "format": "{FORMAT}")', file=file)
    if document.get("version") != FORMAT_VERSION:
        raise InputError(
            f"baseline format version {document.get('version')!r} is not {FORMAT_VERSION}", file=file
        )
    for key in ("device", "suite"):
        if not isinstance(document.get(key), str) or not document[key]:
            raise InputError("missing or not a string", file=file, path=key)
    raw_entries = document.get("entries", {})
    if not isinstance(raw_entries, dict):
        raise InputError("must be an object of case IDs", file=file, path="entries")
    entries: Entries = {}
    for case_id, backends in raw_entries.items():
        if not isinstance(backends, dict):
            raise InputError("must be an object of backends", file=file, path=f"entries.{case_id}")
        entries[case_id] = {}
        for name, raw in backends.items():
            try:
                entries[case_id][name] = BaselineEntry.from_json(raw)
            except EntryProblem as err:
                where = f"entries.{case_id}.{name}.{err.field}"
                raise InputError(
                    f"not a usable baseline entry: {err.reason}", file=file, path=where
                ) from None
    extra = {k: v for k, v in document.items() if k not in _TOP_LEVEL}
    return BaselineFile(document["device"], document["suite"], entries, extra)


def check_baseline_for(
    baseline: BaselineFile, file: str, *, device: str | None = None, suite: str | None = None
) -> None:
    """InputError when the baseline was measured on another device or for another suite than this run's."""
    wrong_device = device is not None and baseline.device != device
    wrong_suite = suite is not None and baseline.suite != suite
    if wrong_device or wrong_suite:
        this = " / ".join(
            part for part in (f"device {device}" if device else "", f"suite {suite}" if suite else "") if part
        )
        raise InputError(
            f"baseline is for device {baseline.device} / suite {baseline.suite}, this run is {this}",
            file=file,
        )


def load_baseline(path: Path, *, device: str | None = None, suite: str | None = None) -> BaselineFile | None:
    """None when there is no file; InputError naming the file when it is not a baseline, or is one of another
    device or suite than those given."""
    if not path.exists() and not path.is_symlink():
        return None
    baseline = baseline_from_json(read_json_bounded(path), str(path))
    check_baseline_for(baseline, str(path), device=device, suite=suite)
    return baseline


def save_baseline(path: Path, baseline: BaselineFile) -> None:
    write_atomic(path, json.dumps(baseline.to_json(), indent=2, sort_keys=True) + "\n")


def update_baseline(
    path: Path, device: str, suite: str, new_entries: Mapping[str, Mapping[str, BaselineEntry]]
) -> tuple[BaselineFile, BaselineFile]:
    """Merge `new_entries` (case ID -> backend -> entry) into the file as it is NOW, under an exclusive
    lock on `<file>.lock`, and write it atomically: (before, after). A concurrent update's entries survive."""
    with exclusive_lock(path):
        before = load_baseline(path, device=device, suite=suite) or BaselineFile(device, suite)
        after = before.copy()
        for case_id, backends in new_entries.items():
            after.entries.setdefault(case_id, {}).update(backends)
        save_baseline(path, after)
    return before, after

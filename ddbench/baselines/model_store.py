"""The one writer of model baselines (`<root>/model-<gpu>/<suite>.json`, or any file `profile
--update-baseline` names), with one set of rules for every command that writes one.

- A file already there is replaced only when it is a model baseline of the same GPU: a latency baseline, a
  results file or another GPU's figures are refused, never overwritten.
- With a case filter only the selected cases are replaced; the stored others are kept, and then the file
  must have been modeled under the same calibration (a mix would compare times across calibrations).
- The write is atomic: a crash leaves the old file or the new one.
The parity rule (no baseline for a kernel whose parity was not judged and passed) is checked before this
is called (ddbench/baselines/model_parity.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.errors import InputError
from ddbench.model.model_baseline import check_baseline
from ddbench.suite.load import read_json


def model_baseline_path(root: Path, gpu_key: str, suite: str) -> Path:
    return root / f"model-{gpu_key}" / f"{suite}.json"


def stored_model_baseline(path: Path) -> Mapping[str, Any] | None:
    """The model baseline stored at `path`, None where there is none; InputError for anything else."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return check_baseline(read_json(path, what="model baseline"), str(path))
    except InputError as err:
        raise InputError(f"{err.reason}; refusing to replace it", file=str(path), path=err.path) from None


def read_model_baseline(path: Path, gpu_key: str) -> Mapping[str, Any]:
    """A model baseline to judge a run of `gpu_key` against, read and checked before the run."""
    document = check_baseline(read_json(path, what="model baseline"), str(path))
    if document.get("gpu") != gpu_key:
        raise InputError(
            f"a baseline for {document.get('gpu')!r}, not {gpu_key!r}", file=str(path), path="gpu"
        )
    return document


def check_replaceable(path: Path, gpu_key: str) -> None:
    """Refuse now, before any work, what can be known of the file before the run: its kind and its GPU (the
    calibration a filtered update must share is known only once the cases are modeled)."""
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise InputError("is not a folder: cannot hold a model baseline", file=str(folder))
    before = stored_model_baseline(path)
    if before is not None and before.get("gpu") != gpu_key:
        raise InputError(
            f"a model baseline of {before.get('gpu')!r}: refusing to replace it with {gpu_key!r} figures",
            file=str(path),
            path="gpu",
        )


def store_model_baseline(
    path: Path, document: dict[str, Any], keep_others: bool
) -> tuple[Mapping[str, Any] | None, dict[str, Any]]:
    """(what was stored before, what is stored now). `keep_others`: a case filter chose the cases, so the
    stored entries of the others stay."""
    check_replaceable(path, document["gpu"])
    before = stored_model_baseline(path)
    if before is not None and keep_others:
        document = _merged(before, document, str(path))
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create: {err.strerror or err}", file=str(folder)) from None
    write_json_atomic(path, document)
    return before, document


def _merged(before: Mapping[str, Any], after: dict[str, Any], source: str) -> dict[str, Any]:
    if before.get("calibration") != after["calibration"]:
        raise InputError(
            f"stored under calibration {before.get('calibration')!r}, now {after['calibration']!r}: "
            "update the whole suite (no -k)",
            file=source,
            path="calibration",
        )
    return after | {"cases": dict(before["cases"]) | after["cases"]}

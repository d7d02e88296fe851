"""Atomic file writes: readers and crashes see the old file or the new one, never half of either."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))  # mkstemp makes 0600; keep the old file's mode, else the umask's
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)  # the rename itself survives a power loss


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the data itself is already synced
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, document: Any) -> None:
    write_atomic(path, json.dumps(document, indent=2, sort_keys=False) + "\n")


def check_writable(
    path: str | Path, option: str, *, inputs: Sequence[str | Path] = (), directory: bool = False
) -> None:
    """Before a run: `path` can be created or replaced (a folder, for `directory`), and is none of `inputs`.

    Tries for real (a temporary file in the target folder), since permission bits lie for root and for
    read-only mounts. Raises InputError naming the option: exit 2 before any work, not a traceback after it.
    """
    from ddbench.errors import InputError

    target = Path(path)
    if any(_same_file(target, Path(other)) for other in inputs):
        raise InputError(f"{target} is also an input of this run; it would be overwritten", path=option)
    if directory:
        folder = target
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{target} exists and is not a folder", path=option)
    else:
        if target.is_dir():
            raise InputError(f"{target} is a folder, not a file", path=option)
        folder = target.parent
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"cannot create {folder}: {existing} is not a folder", path=option)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".ddbench-write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise InputError(f"cannot write in {folder}: {err.strerror or err}", path=option) from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False

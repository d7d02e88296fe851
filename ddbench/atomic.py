"""Atomic file writes: readers and crashes see the old file or the new one, never half of either.

The new content goes to a temporary file in the same folder (named `.<name>.<pid>.<random>.tmp`), is synced,
then renamed over the target. A writer killed before the rename leaves its temporary file behind; the next
write of the same target removes those whose process is gone, so a killed run does not leak a file forever.

`check_writable` / `check_writable_folder` are the up-front checks: a run that would fail to write its output
fails before it starts, with exit 2 naming the option, not with an OSError after an hour of work.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ddbench.errors import InputError

TMP_SUFFIX = ".tmp"
STALE_AFTER_S = 60.0  # a temp file untouched this long whose writer is gone is garbage
LEGACY_STALE_AFTER_S = 3600.0  # temp files without a pid in their name (older versions): by age alone


def write_atomic(path: str | Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    remove_stale_temp_files(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=path.parent)
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


def write_json_atomic(path: str | Path, document: Any) -> None:
    write_atomic(path, json.dumps(document, indent=2, sort_keys=False) + "\n")


# --- temporary files of dead writers ------------------------------------------------------------------------


def temp_file_writer(target_name: str, temp_name: str) -> tuple[bool, int | None]:
    """(is a temp file of `target_name`, the writer's pid); the pid is None in older, pid-less temp names."""
    prefix = f".{target_name}."
    if not (temp_name.startswith(prefix) and temp_name.endswith(TMP_SUFFIX)):
        return False, None
    parts = temp_name[len(prefix) : -len(TMP_SUFFIX)].split(".")
    if len(parts) == 2 and parts[0].isdigit() and parts[1]:
        return True, int(parts[0])
    return len(parts) == 1 and bool(parts[0]), None


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, owned by someone else
        return True
    return True


# Folder -> its hidden `.tmp` names, listed once per process: a folder of many files (captures) written one
# by one must not be listed again at every write. Writers that died before this process started left theirs
# in that listing; one that dies later is cleaned up by the next process.
_temp_names: dict[str, list[str]] = {}
_temp_names_lock = threading.Lock()


def _hidden_temp_names(folder: Path) -> list[str]:
    key = os.path.abspath(folder)
    with _temp_names_lock:
        if key not in _temp_names:
            try:
                with os.scandir(folder) as items:
                    names = [i.name for i in items if i.name.startswith(".") and i.name.endswith(TMP_SUFFIX)]
            except OSError:
                names = []
            _temp_names[key] = names
        return _temp_names[key]


def remove_stale_temp_files(path: Path, now: float | None = None) -> list[Path]:
    """Remove temp files of `path` left by writers that died; returns what was removed (best effort)."""
    now = time.time() if now is None else now
    removed = []
    names = _hidden_temp_names(path.parent)
    for name in list(names):
        ours, pid = temp_file_writer(path.name, name)
        if not ours:
            continue
        candidate = path.parent / name
        try:
            info = candidate.lstat()
        except OSError:
            names.remove(name)  # gone already
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        age = now - info.st_mtime
        stale = age > LEGACY_STALE_AFTER_S if pid is None else age > STALE_AFTER_S and not _process_alive(pid)
        if stale:
            try:
                candidate.unlink()
                names.remove(name)
                removed.append(candidate)
            except (OSError, ValueError):
                pass
    return removed


# --- writable output locations, checked before a run -------------------------------------------------------


def _nearest_existing(path: Path) -> Path:
    current = path
    while not os.path.lexists(current):
        if current.parent == current:
            break
        current = current.parent
    return current


def _probe_folder(folder: Path, what: str, shown: str) -> None:
    """Create, write one byte to, sync and remove a file in `folder`: what a real write will need."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".ddbench-probe.", suffix=TMP_SUFFIX, dir=folder)
    except OSError as err:
        raise InputError(f"cannot write in {folder}: {_reason(err)}", file=shown, path=what) from None
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    except OSError as err:
        raise InputError(f"cannot write in {folder}: {_reason(err)}", file=shown, path=what) from None
    finally:
        os.close(fd)
        Path(probe).unlink(missing_ok=True)


def _reason(err: OSError) -> str:
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "not writable (" + (err.strerror or "permission denied") + ")"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left"
    return err.strerror or str(err)


def _creatable_folder(folder: Path, what: str, shown: str) -> None:
    """`folder` exists as a writable directory, or could be created under its nearest existing ancestor."""
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        raise InputError(
            f"{existing} is not a folder, so nothing can be written under it", file=shown, path=what
        )
    _probe_folder(existing, what, shown)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def check_writable(path: str | Path, what: str, inputs: Iterable[str | Path] = ()) -> None:
    """InputError (exit 2, naming the option `what`) unless a file can be written atomically at `path`:
    not a folder or a device, not one of `inputs` (an output must not overwrite what the run reads), and its
    folder exists or can be created and takes a new file."""
    target = Path(path)
    shown = str(path)
    if target.is_dir():
        raise InputError("is a folder; give a file name", file=shown, path=what)
    if os.path.lexists(target) and not target.is_file():
        raise InputError("exists and is not a regular file", file=shown, path=what)
    for source in inputs:
        if os.path.lexists(source) and _same_file(target, Path(source)):
            raise InputError(f"is the input {source}; writing it would destroy it", file=shown, path=what)
    _creatable_folder(target.parent, what, shown)


def check_writable_folder(path: str | Path, what: str, inputs: Iterable[str | Path] = ()) -> None:
    """InputError (exit 2, naming the option) unless `path` is, or can be created as, a writable folder."""
    target = Path(path)
    shown = str(path)
    if os.path.lexists(target) and not target.is_dir():
        raise InputError("exists and is not a folder", file=shown, path=what)
    for source in inputs:
        if os.path.lexists(source) and os.path.lexists(target) and _same_file(target, Path(source)):
            raise InputError(f"is the input {source}", file=shown, path=what)
    _creatable_folder(target, what, shown)


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

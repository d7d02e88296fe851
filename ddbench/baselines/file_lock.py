"""An exclusive advisory lock beside a file (`<file>.lock`), so read-merge-write cycles do not interleave.

`fcntl.flock` is released by the kernel when the holder dies, so a killed update never leaves the file locked.
The lock file itself stays (removing it would let a third writer lock a different inode than a waiting one).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ddbench.errors import InputError

POLL_SECONDS = 0.05


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextmanager
def exclusive_lock(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """Hold the lock of `path` for the block; InputError when it cannot be created or is held too long."""
    target = lock_path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise InputError(f"cannot create the lock file: {err.strerror}", file=str(target)) from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InputError(
                        f"another process has held the lock for over {timeout_s:g} s; try again when it ends",
                        file=str(target),
                    ) from None
                time.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

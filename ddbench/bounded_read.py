"""Read a file a user named without letting it hurt the tool: regular files only, a size cap before reading.

A suite may name any path. `/dev/zero` never ends, a FIFO blocks the reader forever, a 10 GB file fills
memory: the file is opened non-blocking (so opening a FIFO cannot hang), checked with fstat before a byte
is read, and read at most up to its limit (so a file that grows while being read cannot get past it).
Limits are per kind of file and can be raised with an environment variable (docs/suites.md).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from ddbench.errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
_CHUNK = 1 << 20


def parse_size(text: str, name: str) -> int:
    """Bytes from "1048576", "500M", "2G", "1.5GiB" (K/M/G/T are powers of 1024); ValueError otherwise."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"{name}={text!r}: expected a byte count such as 1048576, 500M or 2G")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def size_limit(env: Mapping[str, str], name: str, default: int) -> int:
    """The limit from environment variable `name` when it is set, else `default`."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return parse_size(text, name)
    except ValueError as err:
        raise InputError(str(err), path=name) from None


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "named pipe (FIFO)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def read_regular_file(
    path: str | Path, *, what: str, max_bytes: int, raise_with: str, missing: str = "no such file"
) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError(file=path) for anything else.

    `what` names the kind of file in messages ("suite file", "capture file"); `raise_with` says how to
    raise the limit.
    """
    file = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(missing, file=file) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not a {what}", file=file) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=file) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"is a directory, not a {what}", file=file)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                f"is a {_kind(info.st_mode)}, not a regular file; a {what} must be a regular file", file=file
            )
        if info.st_size > max_bytes:
            raise InputError(_too_big(info.st_size, max_bytes, what, raise_with), file=file)
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # it grew after the fstat
                raise InputError(_too_big(total, max_bytes, what, raise_with), file=file)
        return b"".join(chunks)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=file) from None
    finally:
        os.close(fd)


def _too_big(size: int, limit: int, what: str, raise_with: str) -> str:
    return f"is {size} bytes, above the {limit}-byte limit for a {what} ({raise_with})"

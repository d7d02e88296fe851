"""The tensors a checkpoint folder holds, from the safetensors headers alone: names, dtypes, shapes, files.

A 16B checkpoint is tens of GB in several shards; which tensors exist, and their shapes, are in each
shard's header (8 bytes of length, then JSON), so they are checked before anything is read and the size
of what a case will load is known in advance. A folder holds `model.safetensors`, or
`model.safetensors.index.json` naming the shard of every tensor. Every problem is an InputError naming the
file (and the tensor).
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.errors import InputError
from ddbench.suite.load import read_json

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
MAX_INDEX_BYTES = 64 << 20
# Bytes per element of the dtypes a checkpoint's weights may be stored in.
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    dtype: str  # safetensors' name: BF16, F16, F32, F8_E4M3, ...
    shape: tuple[int, ...]
    begin: int  # its bytes in the file: [begin, end)
    end: int


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Every tensor of one safetensors file, its header checked (offsets inside the file)."""
    file = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("no such file", file=file) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=file) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError("is not a regular file; a safetensors shard must be one", file=file)
        os.set_blocking(fd, True)
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise InputError("truncated or not a safetensors file: no 8-byte header length", file=file)
        size = int.from_bytes(head, "little")
        if size < 2 or size > MAX_HEADER_BYTES or 8 + size > info.st_size:
            raise InputError("truncated or not a safetensors file: header length out of range", file=file)
        raw = os.pread(fd, size, 8)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=file) from None
    finally:
        os.close(fd)
    header = header_object(raw, file)
    body = info.st_size - 8 - size
    start = 8 + size
    return {
        name: _entry(path, name, entry, start, body)
        for name, entry in header.items()
        if name != "__metadata__"
    }


def header_object(raw: bytes, file: str) -> dict[str, Any]:
    """A safetensors header's JSON (the bytes after the length field), or InputError in plain words."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise InputError("not a safetensors file: the header is not JSON", file=file) from None
    if not isinstance(header, dict):
        raise InputError("not a safetensors file: the header is not a JSON object", file=file)
    return header


def _entry(path: Path, name: str, entry: Any, start: int, body: int) -> TensorEntry:
    file = str(path)
    if not isinstance(entry, dict):
        raise InputError("not a safetensors header entry", file=file, path=name)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if (
        not isinstance(dtype, str)
        or not isinstance(shape, list)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise InputError("not a safetensors header entry (dtype, shape, data_offsets)", file=file, path=name)
    if not 0 <= offsets[0] <= offsets[1] <= body:
        raise InputError(
            f"truncated: the tensor ends at byte {offsets[1]} of the data, the file holds {body}",
            file=file,
            path=name,
        )
    held, needed = offsets[1] - offsets[0], math.prod(shape) * DTYPE_BYTES.get(dtype, 0)
    if dtype in DTYPE_BYTES and held != needed:
        raise InputError(
            f"holds {held} bytes; {dtype} of shape {shape} is {needed} bytes", file=file, path=name
        )
    return TensorEntry(path, dtype, tuple(shape), start + offsets[0], start + offsets[1])


class FolderTensors:
    """The tensors of a checkpoint folder, each shard's header read when one of its tensors is first
    asked for (a model truncated to 2 layers reads the headers of the shards those hold)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._headers: dict[Path, dict[str, TensorEntry]] = {}
        index = folder / INDEX_FILE
        if index.exists():
            self.index_file: str = str(index)
            self._shard_of = _weight_map(index, folder)
        elif (folder / SINGLE_FILE).exists():
            self.index_file = str(folder / SINGLE_FILE)
            self._shard_of = None
        else:
            raise InputError(
                f"no {SINGLE_FILE} and no {INDEX_FILE} in the checkpoint folder", file=str(folder)
            )

    def find(self, name: str) -> TensorEntry:
        """The tensor's entry; InputError naming the file that should hold it when it does not."""
        shard = self.folder / SINGLE_FILE if self._shard_of is None else self._shard_of.get(name)
        if shard is None:
            raise InputError(
                "missing: the index names no shard for this tensor", file=self.index_file, path=name
            )
        if shard not in self._headers:
            self._headers[shard] = read_header(shard)
        entry = self._headers[shard].get(name)
        if entry is None:
            raise InputError("missing: no such tensor in the file", file=str(shard), path=name)
        return entry

    def has(self, name: str) -> bool:
        try:
            self.find(name)
        except InputError:
            return False
        return True


def _weight_map(index: Path, folder: Path) -> dict[str, Path]:
    data = read_json(index, what="safetensors index", max_bytes=MAX_INDEX_BYTES)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise InputError("must be an object with a weight_map of tensor name to shard file", file=str(index))
    out = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard or shard in (".", ".."):
            raise InputError(
                f"the shard must be a file name in the checkpoint folder, got {shard!r}",
                file=str(index),
                path=f"weight_map.{name}",
            )
        out[name] = folder / shard
    return out

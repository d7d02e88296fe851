"""Read a capture file back into inputs a backend can run, checking everything on the way.

Every problem — a missing or truncated file, bytes that are not safetensors, a missing tensor, a wrong
dtype or shape, bad metadata, a checksum mismatch, inputs that break the layout's invariants — becomes an
InputError naming the file, so a suite that replays a folder of captures says which one is broken.
Only regular files up to a size limit are read (ddbench/bounded_read.py), and no message quotes the
file's bytes: a capture path pointing at a secret or a device says what is wrong, not what is inside.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ddbench.bounded_read import read_regular_file, size_limit
from ddbench.errors import InputError
from ddbench.inputs.capture_format import (
    CANDIDATE_TENSOR,
    FORMAT_VERSION,
    METADATA_KEY,
    OUTPUT_TENSOR,
    REQUIRED_METADATA,
    TENSOR_SPEC,
    tensor_sha256,
)
from ddbench.inputs.check import check_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.mask_tree import trees_from_custom_mask
from ddbench.inputs.safetensors_header import header_object
from ddbench.poison import poison_
from ddbench.suite.presets import HEAD_DIM_V

_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit: a larger length means the bytes are not safetensors
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A compacted capture holds the pages its call read; 4 GiB covers bs 64 at a 16K prefix with room to spare.
MAX_CAPTURE_BYTES = 4 << 30
MAX_CAPTURE_BYTES_ENV = "DDBENCH_MAX_CAPTURE_BYTES"


@dataclass
class Capture:
    """One captured call: inputs ready to run (fresh poisoned output), what the real kernel wrote, and why."""

    path: Path
    inputs: VerifyInputs
    output: torch.Tensor  # (T, H, 512) bf16: o_extend as the serving kernel left it
    metadata: dict[str, Any]
    sha256: str = ""  # of the file's bytes, as read: what a suite case records to notice a later change
    candidate_output: torch.Tensor | None = None  # a breach capture: what the candidate kernel wrote


def capture_size_limit() -> int:
    """MAX_CAPTURE_BYTES, unless DDBENCH_MAX_CAPTURE_BYTES (e.g. 16G) says otherwise."""
    return size_limit(os.environ, MAX_CAPTURE_BYTES_ENV, MAX_CAPTURE_BYTES)


def read_capture_bytes(path: str | Path, max_bytes: int | None = None) -> bytes:
    """The file's bytes: a regular file within the size limit, else InputError(file=path)."""
    return read_regular_file(
        path,
        what="capture file",
        max_bytes=capture_size_limit() if max_bytes is None else max_bytes,
        raise_with=f"set {MAX_CAPTURE_BYTES_ENV}, e.g. {MAX_CAPTURE_BYTES_ENV}=16G, to raise it",
        missing="no such capture file",
    )


def read_capture(path: str | Path, *, max_bytes: int | None = None) -> Capture:
    """Load and validate one capture file; raises InputError(file=path) on any problem."""
    path = Path(path)
    file = str(path)
    data = read_capture_bytes(path, max_bytes)
    metadata = _parse_header(data, file)
    tensors = _load_tensors(data, file)
    _check_tensors(tensors, file)
    if tensor_sha256(tensors) != metadata["tensor_sha256"]:
        raise InputError(
            "checksum mismatch: the tensor bytes differ from metadata.tensor_sha256 (corrupted file?)",
            file=file,
        )
    return Capture(
        path=path,
        inputs=_inputs(tensors, metadata, file),
        output=tensors[OUTPUT_TENSOR],
        metadata=metadata,
        sha256=hashlib.sha256(data).hexdigest(),
        candidate_output=tensors.get(CANDIDATE_TENSOR),
    )


def _parse_header(data: bytes, file: str) -> dict[str, Any]:
    """The safetensors header, checked by hand so truncation and garbage get plain-words errors."""
    if len(data) < 8:
        raise InputError(
            f"truncated or not a safetensors file: {len(data)} bytes, not even the 8-byte header length",
            file=file,
        )
    size = int.from_bytes(data[:8], "little")
    if size < 2 or size > _MAX_HEADER:  # never print the field: it is eight bytes of someone's file
        raise InputError("not a safetensors file: header length field out of range", file=file)
    if 8 + size > len(data):
        raise InputError(
            f"truncated: the header needs {size} bytes after the length field, the file has {len(data) - 8}",
            file=file,
        )
    header = header_object(data[8 : 8 + size], file)
    body = len(data) - 8 - size
    for name, entry in header.items():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        offsets = entry.get("data_offsets")
        if (
            isinstance(offsets, list)
            and len(offsets) == 2
            and isinstance(offsets[1], int)
            and offsets[1] > body
        ):
            raise InputError(
                f"truncated: tensor {name} ends at byte {offsets[1]} of the data, the file holds {body}",
                file=file,
            )
    return _parse_metadata(header.get("__metadata__"), file)


def _parse_metadata(raw: Any, file: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or METADATA_KEY not in raw:
        raise InputError(
            f"no {METADATA_KEY!r} entry in the safetensors metadata: not a ddbench capture", file=file
        )
    try:
        metadata = json.loads(raw[METADATA_KEY])
    except (TypeError, ValueError, RecursionError) as err:
        where = f": {err.msg} at position {err.pos}" if isinstance(err, json.JSONDecodeError) else ""
        raise InputError(f"is not valid JSON{where}", file=file, path=f"metadata[{METADATA_KEY}]") from None
    if not isinstance(metadata, dict):
        raise InputError("must be a JSON object", file=file, path=f"metadata[{METADATA_KEY}]")
    for key, types in REQUIRED_METADATA.items():
        value = metadata.get(key)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            want = " or ".join(t.__name__ for t in types)
            got = "nothing" if value is None else f"a {type(value).__name__}"
            raise InputError(f"missing or not a {want} (got {got})", file=file, path=f"metadata.{key}")
    if metadata["format_version"] != FORMAT_VERSION:
        raise InputError(
            f"format version {metadata['format_version']}; this ddbench reads version {FORMAT_VERSION}",
            file=file,
            path="metadata.format_version",
        )
    for key, least in (("page_size", 1), ("max_len_extend", 0)):
        if metadata[key] < least:
            raise InputError(f"{metadata[key]} is below {least}", file=file, path=f"metadata.{key}")
    if not _SHA256.fullmatch(metadata["tensor_sha256"]):
        raise InputError("is not a hex SHA-256", file=file, path="metadata.tensor_sha256")
    return metadata


def _load_tensors(data: bytes, file: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    try:
        return load(data)
    except Exception as err:  # the library's own checks: offsets, dtypes, overlaps
        raise InputError(f"not a valid safetensors file: {err}", file=file) from None


def _check_tensors(tensors: dict[str, torch.Tensor], file: str) -> None:
    for name, (dtypes, rank) in TENSOR_SPEC.items():
        if name not in tensors:
            raise InputError(f"missing tensor {name}", file=file)
        t = tensors[name]
        if t.dtype not in dtypes:
            want = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
            raise InputError(
                f"dtype {str(t.dtype).removeprefix('torch.')}, expected {want}", file=file, path=name
            )
        if t.dim() != rank:
            raise InputError(
                f"shape {tuple(t.shape)} has rank {t.dim()}, expected {rank}", file=file, path=name
            )
    total_q, heads = tensors["q_extend"].shape[:2]
    if heads < 1:  # no attention head: nothing a kernel computes, and no case can describe it
        raise InputError(f"shape {tuple(tensors['q_extend'].shape)} has 0 heads", file=file, path="q_extend")
    expect = (total_q, heads, HEAD_DIM_V)
    for name in (OUTPUT_TENSOR, CANDIDATE_TENSOR):
        t = tensors.get(name)
        if t is None:
            continue
        if t.dtype != torch.bfloat16:
            raise InputError(
                f"dtype {str(t.dtype).removeprefix('torch.')}, expected bfloat16", file=file, path=name
            )
        if tuple(t.shape) != expect:
            raise InputError(f"shape {tuple(t.shape)}, expected {expect}", file=file, path=name)


def _check_sizing_fields(x: VerifyInputs, file: str) -> None:
    """Header numbers that size a backend's work, held to the tensors they describe.

    A backend allocates and launches by `max_len_extend` (mask words per query row, Triton's query blocks)
    and pages the pool by `page_size`; neither is seen in the tensors, so an absurd value would pass every
    tensor check and then hang or exhaust memory. SGLang passes the longest request's draft count and a page
    no larger than its pool, so those are the bounds.
    """
    total_q, pool = x.q_extend.shape[0], x.k_buffer.shape[0]
    if x.max_len_extend > max(total_q, 1):
        raise InputError(
            f"{x.max_len_extend} is above the {total_q} draft tokens of q_extend (it is the longest "
            "request's draft count, which sizes every backend's work)",
            file=file,
            path="metadata.max_len_extend",
        )
    if x.page_size > max(pool, 1):
        raise InputError(
            f"{x.page_size} is above the {pool} rows of k_buffer (a page must fit in the pool)",
            file=file,
            path="metadata.page_size",
        )


def _inputs(tensors: dict[str, torch.Tensor], metadata: dict[str, Any], file: str) -> VerifyInputs:
    k_buffer = tensors["k_buffer"]
    x = VerifyInputs(
        q_extend=tensors["q_extend"],
        k_extend=tensors["k_extend"],
        v_extend=tensors["v_extend"],
        o_extend=poison_(torch.empty_like(tensors[OUTPUT_TENSOR])),
        k_buffer=k_buffer,
        v_buffer=k_buffer[..., :HEAD_DIM_V],
        qo_indptr=tensors["qo_indptr"],
        kv_indptr=tensors["kv_indptr"],
        kv_indices=tensors["kv_indices"],
        out_cache_loc=tensors["out_cache_loc"],
        custom_mask=tensors["custom_mask"],
        mask_indptr=tensors["mask_indptr"],
        sm_scale=float(metadata["sm_scale"]),
        max_len_extend=metadata["max_len_extend"],
        page_size=metadata["page_size"],
        is_causal=metadata["is_causal"],
    )
    if x.qo_indptr.numel() < 2:
        raise InputError(
            f"has {x.qo_indptr.numel()} entries: no request (batch size 0), so no call to replay; "
            "it needs batch size + 1 entries",
            file=file,
            path="qo_indptr",
        )
    check_inputs(x, source=file)
    _check_sizing_fields(x, file)
    q_lens = tuple(int(n) for n in (x.qo_indptr[1:] - x.qo_indptr[:-1]).tolist())
    prefix_lens = tuple(int(n) for n in (x.kv_indptr[1:] - x.kv_indptr[:-1]).tolist())
    if min(q_lens) < 1:  # a verify call gives every request its draft tokens; no case holds q_len 0
        raise InputError(
            f"request {q_lens.index(0)} has 0 draft tokens (q_lens {list(q_lens)[:8]}): "
            "nothing of it to verify",
            file=file,
            path="qo_indptr",
        )
    if max(q_lens) > x.max_len_extend:
        raise InputError(
            f"{x.max_len_extend} is below the longest request's {max(q_lens)} draft tokens "
            "(the kernel would leave rows unwritten)",
            file=file,
            path="metadata.max_len_extend",
        )
    trees = trees_from_custom_mask(x.custom_mask, x.mask_indptr, prefix_lens, q_lens)
    return dataclasses.replace(x, prefix_lens=prefix_lens, q_lens=q_lens, trees=trees)

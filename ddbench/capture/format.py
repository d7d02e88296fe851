"""Writing capture files: the bytes of one verify-attention call (format: ddbench/inputs/capture_format.py).

The checksum is over the tensor bytes in name order, independent of the file's layout, so anyone can write
a capture with `safetensors.torch.save` and one line of hashlib (docs/capture-format.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ddbench.atomic import write_atomic
from ddbench.inputs.capture_format import FORMAT_VERSION, METADATA_KEY, TENSOR_SPEC, tensor_sha256


def encode_capture(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]) -> bytes:
    """The file's bytes: the tensors as given, the metadata completed with format version and checksum."""
    missing = [name for name in TENSOR_SPEC if name not in tensors]
    if missing:
        raise ValueError(f"a capture needs every tensor of the format; missing {', '.join(missing)}")
    from safetensors.torch import save

    cpu = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    document = dict(metadata)
    document["format_version"] = FORMAT_VERSION
    document["tensor_sha256"] = tensor_sha256(cpu)
    return save(cpu, metadata={METADATA_KEY: json.dumps(document, sort_keys=True)})


def write_capture(path: str | Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]) -> int:
    """Write one capture atomically (readers never see half a file); returns the bytes written."""
    data = encode_capture(tensors, metadata)
    write_atomic(path, data)
    return len(data)

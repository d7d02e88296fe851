"""The capture file's format: one verify-attention call as a safetensors file (docs/capture-format.md).

What a reader must know (tensor names, dtypes, ranks, metadata keys, the checksum); writing lives with
the recorder in ddbench.capture. Tensors carry SGLang's names so a capture reads like the call it came
from; the metadata is one JSON document under the safetensors header's `__metadata__` key
"ddbench.capture", so the file stays loadable by any safetensors reader. The checksum is over the tensor
bytes in name order, independent of the file's layout, so anyone can write a capture with
`safetensors.torch.save` and one line of hashlib.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

FORMAT_VERSION = 1
METADATA_KEY = "ddbench.capture"
OUTPUT_TENSOR = "o_extend_captured"
# Optional: what a candidate kernel wrote for the same call (a serving plugin's breach capture).
CANDIDATE_TENSOR = "o_extend_candidate"
SUFFIX = ".safetensors"

# name -> (allowed dtypes, rank); the first dtype listed is what the recorder writes.
TENSOR_SPEC: dict[str, tuple[tuple[torch.dtype, ...], int]] = {
    "q_extend": ((torch.bfloat16,), 3),
    "k_extend": ((torch.bfloat16,), 3),
    "v_extend": ((torch.bfloat16,), 3),
    "k_buffer": ((torch.bfloat16,), 3),
    "qo_indptr": ((torch.int32, torch.int64), 1),
    "kv_indptr": ((torch.int32, torch.int64), 1),
    "kv_indices": ((torch.int64, torch.int32), 1),
    "out_cache_loc": ((torch.int64, torch.int32), 1),
    "custom_mask": ((torch.bool, torch.uint8), 1),
    "mask_indptr": ((torch.int64, torch.int32), 1),
    OUTPUT_TENSOR: ((torch.bfloat16,), 3),
}

# Metadata the reader needs (name -> accepted JSON types); the rest is descriptive and may be null.
REQUIRED_METADATA: dict[str, tuple[type, ...]] = {
    "format_version": (int,),
    "sm_scale": (int, float),
    "page_size": (int,),
    "is_causal": (bool,),
    "max_len_extend": (int,),
    "tensor_sha256": (str,),
}
DESCRIPTIVE_METADATA = (
    "layer",
    "tp_rank",
    "tp_size",
    "attn_tp_rank",
    "attn_tp_size",
    "model",
    "versions",
    "device",
    "triton_interpret",
    "created",
    "call_index",
    "source",
    "out_cache_loc",
    "pool",
    "breach",
)


def tensor_sha256(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of every tensor's raw C-order bytes, concatenated in sorted name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.numel():
            digest.update(t.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()

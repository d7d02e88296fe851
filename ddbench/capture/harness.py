"""Call SGLang's (possibly wrapped) `extend_attention_fwd` as its Triton backend does on target-verify.

For making captures without a server (tests, scripts/make-captures.py): the function is looked up on the
module at call time, so an installed wrapper sees the call, and it is called from two frames shaped like
the backend's — `forward_extend` with a `forward_batch` local and `_forward_extend_kernel` with a `layer`
local — so the recorder finds the layer id and the real out_cache_loc as it would in a server.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass

import torch

from ddbench.backends.interpreter_fix import bf16_dot_fixed
from ddbench.backends.triton_sglang import call_extend_attention
from ddbench.inputs import VerifyInputs
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

TARGET_MODULE = EXTEND_ATTENTION_MODULE


@dataclass(frozen=True)
class FakeLayer:
    """What the recorder reads from SGLang's RadixAttention."""

    layer_id: int


@dataclass(frozen=True)
class FakeForwardBatch:
    """What the recorder reads from SGLang's ForwardBatch."""

    out_cache_loc: torch.Tensor


def _kernel_call(x: VerifyInputs) -> None:
    call_extend_attention(importlib.import_module(TARGET_MODULE).extend_attention_fwd, x)


def _forward_extend_kernel(layer: FakeLayer, x: VerifyInputs) -> None:
    _kernel_call(x)


def forward_extend(layer: FakeLayer, forward_batch: FakeForwardBatch | None, x: VerifyInputs) -> None:
    _forward_extend_kernel(layer, x)


def call_like_sglang(
    x: VerifyInputs, layer_id: int | None = 0, *, with_out_cache_loc: bool = True
) -> torch.Tensor:
    """Poison x.o_extend, run the kernel through SGLang-shaped frames, return the output (a clone)."""
    x.fresh_output()
    layer = FakeLayer(layer_id) if layer_id is not None else None
    batch = FakeForwardBatch(x.out_cache_loc) if with_out_cache_loc else None
    fix = bf16_dot_fixed() if not x.q_extend.is_cuda else contextlib.nullcontext()
    with fix:
        forward_extend(layer, batch, x)  # type: ignore[arg-type]
    return x.o_extend.clone()

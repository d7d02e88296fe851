"""The poison pattern: outputs are filled with it before a call, so an element a kernel never wrote can be
counted bit-exactly afterwards (a leaf: inputs fill with it, metrics, the harness and the plugin count it)."""

from __future__ import annotations

import torch

# A quiet NaN with a payload no arithmetic produces: an element still holding it was never written.
POISON_BITS = {torch.bfloat16: 0x7FE5, torch.float16: 0x7E25, torch.float32: 0x7FE5E5E5}
_INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def poison_(tensor: torch.Tensor) -> torch.Tensor:
    """Fill with the poison NaN in place (bit-exact, so unwritten elements can be counted)."""
    tensor.view(_INT_VIEW[tensor.dtype]).fill_(_signed(POISON_BITS[tensor.dtype], tensor.dtype))
    return tensor


def poisoned_mask(tensor: torch.Tensor) -> torch.Tensor:
    """True where an element still holds the exact poison pattern."""
    if tensor.dtype not in POISON_BITS:
        return torch.zeros(tensor.shape, dtype=torch.bool, device=tensor.device)
    return tensor.view(_INT_VIEW[tensor.dtype]) == _signed(POISON_BITS[tensor.dtype], tensor.dtype)


def _signed(bits: int, dtype: torch.dtype) -> int:
    width = 32 if dtype == torch.float32 else 16
    return bits - (1 << width) if bits >= 1 << (width - 1) else bits

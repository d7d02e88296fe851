"""bf16 ULP arithmetic (pure tensor functions).

Two bf16 values: their distance on the bf16 lattice (bit patterns mapped to ordered integers; +0 == -0).
A bf16 value against a float reference r: |a - r| in units of the bf16 spacing at |r|.
Subnormals have the fixed spacing 2^-133; the spacing never drops below it.
"""

from __future__ import annotations

import torch

BF16_MANTISSA_BITS = 7
BF16_MIN_EXPONENT = -126  # smallest normal exponent; below it the spacing is constant
BF16_SUBNORMAL_SPACING_EXP = BF16_MIN_EXPONENT - BF16_MANTISSA_BITS  # 2^-133


def bf16_ordinal(x: torch.Tensor) -> torch.Tensor:
    """Position of each bf16 value on the number line, as int32 (neighbours differ by 1; ±0 map to 0)."""
    if x.dtype != torch.bfloat16:
        raise TypeError(f"bf16_ordinal needs bfloat16, got {x.dtype}")
    bits = x.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    magnitude = bits & 0x7FFF
    return torch.where(bits >= 0x8000, -magnitude, magnitude)


def lattice_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|ordinal(a) - ordinal(b)| as float64; NaN where either side is NaN."""
    distance = (bf16_ordinal(a) - bf16_ordinal(b)).abs().to(torch.float64)
    return distance.masked_fill(a.isnan() | b.isnan(), float("nan"))


def bf16_spacing(r: torch.Tensor) -> torch.Tensor:
    """The bf16 ULP at |r| (float64): 2^(floor(log2|r|) - 7), at least the subnormal spacing 2^-133."""
    # |r| = m * 2^e, m in [0.5, 1); below the smallest normal (0 included) the spacing is constant.
    _, exponent = torch.frexp(r.to(torch.float64).abs().clamp_min(2.0**BF16_MIN_EXPONENT))
    exponent = (exponent - 1 - BF16_MANTISSA_BITS).clamp_min(BF16_SUBNORMAL_SPACING_EXP)
    return torch.ldexp(torch.ones_like(exponent, dtype=torch.float64), exponent)


def ulps_vs_float(a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """|a - r| / spacing(r), float64."""
    return (a.to(torch.float64) - r.to(torch.float64)).abs() / bf16_spacing(r)


def row_scaled_ulps(a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """|a - r| in ULPs of the row's largest |r|: attention outputs are averages of V rows, so an element
    near zero says nothing; the error at the row's own scale is what a kernel controls."""
    r64 = r.to(torch.float64)
    row_max = r64.abs().nan_to_num(nan=0.0, posinf=0.0).amax(dim=-1, keepdim=True)
    return (a.to(torch.float64) - r64).abs() / bf16_spacing(row_max)


def channel_scaled_ulps(a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """|a - r| in ULPs of the channel's largest |r| over the whole output (every token and head): MLA
    latents carry a few channels far larger than the rest, which set a row's scale and hide an error
    confined to the many small channels; at its own channel's scale that error shows."""
    r64 = r.to(torch.float64)
    magnitude = r64.abs().nan_to_num(nan=0.0, posinf=0.0)
    dims = tuple(range(r64.dim() - 1))
    channel_max = magnitude.amax(dim=dims, keepdim=True) if dims and magnitude.numel() else magnitude
    return (a.to(torch.float64) - r64).abs() / bf16_spacing(channel_max)

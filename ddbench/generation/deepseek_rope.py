"""DeepSeek's rotary embedding of the 64-wide rope part: interleaved pairs, YaRN scaling where configured.

DeepSeek-V2/V3 rotate the pairs (x[2i], x[2i+1]) by position * inv_freq[i] (SGLang: is_neox_style=False),
not the two halves. With YaRN, the frequencies below the ramp [beta_fast, beta_slow] rotations over the
original context are divided by `factor`, those above kept, a linear blend between; and cos and sin are
multiplied by mscale(factor, mscale) / mscale(factor, mscale_all_dim) (1 for DeepSeek-V3, V2-Lite and Kimi
K2, whose two mscales are equal). The attention's own scale, mscale(factor, mscale_all_dim)^2, is the
config's `sm_scale`, not applied here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ddbench.inputs.checkpoint_config import RopeConfig, Yarn, yarn_mscale


def _correction_dim(rotations: float, dim: int, base: float, original_max: int) -> float:
    """The dimension index whose wavelength fits `rotations` turns into the original context."""
    return dim * math.log(original_max / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_inv_freq(dim: int, base: float, yarn: Yarn) -> torch.Tensor:
    """YaRN's inverse frequencies (float64, dim/2 of them)."""
    exponents = torch.arange(0, dim, 2, dtype=torch.float64) / dim
    extrapolated = 1.0 / base**exponents
    interpolated = extrapolated / yarn.factor
    low = max(
        math.floor(_correction_dim(yarn.beta_fast, dim, base, yarn.original_max_position_embeddings)), 0
    )
    high = min(
        math.ceil(_correction_dim(yarn.beta_slow, dim, base, yarn.original_max_position_embeddings)), dim - 1
    )
    if low == high:
        high += 0.001  # a ramp of zero width
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1.0 - ramp  # 1: the extrapolated (unscaled) frequency; 0: the interpolated one
    return interpolated * (1 - keep) + extrapolated * keep


@dataclass(frozen=True)
class DeepseekRope:
    config: RopeConfig
    dim: int = 64

    def inv_freq(self) -> torch.Tensor:
        yarn = self.config.yarn
        if yarn is None:
            return 1.0 / self.config.theta ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim)
        return yarn_inv_freq(self.dim, self.config.theta, yarn)

    def cos_sin_scale(self) -> float:
        yarn = self.config.yarn
        if yarn is None:
            return 1.0
        return yarn_mscale(yarn.factor, yarn.mscale) / yarn_mscale(yarn.factor, yarn.mscale_all_dim)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (N, ..., dim) rotated at integer positions (N,); the same layout out as in."""
        angle = positions.to(torch.float64)[:, None] * self.inv_freq().to(positions.device)[None, :]
        scale = self.cos_sin_scale()
        cos, sin = (angle.cos() * scale).to(x.dtype), (angle.sin() * scale).to(x.dtype)
        while cos.dim() < x.dim():
            cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        if self.config.interleaved:
            a, b = x[..., 0::2], x[..., 1::2]
            return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
        half = self.dim // 2
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

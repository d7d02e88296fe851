"""MLA model presets: local-head counts and the YaRN softmax scale.

Derived, not typed in: sm_scale = qk_head_dim^-0.5 * mscale^2 with qk_head_dim = 128 + 64 = 192 and
mscale = 0.1 * mscale_all_dim * ln(rope_factor) + 1. Using 1/sqrt(576) (the absorbed width) is a classic bug.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddbench.mla import HEAD_DIM_QK, HEAD_DIM_V, KV_LORA_RANK, ROPE_DIM

__all__ = ["HEAD_DIM_QK", "HEAD_DIM_V", "KV_LORA_RANK", "ROPE_DIM"]
_QK_NOPE_PLUS_ROPE = 128 + ROPE_DIM  # 192: the per-head width the model was trained with


def yarn_sm_scale(rope_factor: float, mscale_all_dim: float = 1.0) -> float:
    mscale = 0.1 * mscale_all_dim * math.log(rope_factor) + 1.0
    return _QK_NOPE_PLUS_ROPE**-0.5 * mscale * mscale


@dataclass(frozen=True)
class ModelPreset:
    name: str
    heads: int
    rope_factor: float
    aliases: tuple[str, ...] = ()

    @property
    def sm_scale(self) -> float:
        return yarn_sm_scale(self.rope_factor)


PRESETS: tuple[ModelPreset, ...] = (
    ModelPreset("kimi-k2.6", heads=64, rope_factor=64.0, aliases=("kimi-k2.5", "kimi-k2-0905")),
    ModelPreset("kimi-k2-0711", heads=64, rope_factor=32.0),
    ModelPreset("deepseek-v3", heads=128, rope_factor=40.0, aliases=("deepseek-r1",)),
)

_BY_NAME = {name: p for p in PRESETS for name in (p.name, *p.aliases)}


def find_preset(name: str) -> ModelPreset | None:
    return _BY_NAME.get(name)


def preset_names() -> list[str]:
    return sorted(_BY_NAME)

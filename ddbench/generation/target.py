"""What the decode loop, the drafter and the pool need of a target model, seeded or read from a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ddbench.generation.absorbed_attention import Attend


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    vocab: int
    heads: int  # heads a rank holds: those of one verify call
    sm_scale: float
    seed: int


class TargetModel(Protocol):
    shape: ModelShape
    bos: int  # the token every prompt starts with
    kv_dtype: torch.dtype  # the queries' and KV rows' the verify call gets: bf16, the kernel's layout

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """Logits (N, vocab) float32 of N tokens at their positions; `attend` runs each verify call."""
        ...

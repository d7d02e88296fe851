"""The floor of a case: the least time any kernel needs on a GPU, max(compulsory bytes / DRAM bandwidth,
FLOPs / tensor peak) (pure).

Compulsory bytes: every request's KV rows (prefix + draft tokens, 1152 B each, one MLA KV head shared by
all heads) read once, plus the queries (1152 B per row) and the output (1024 B per row). FLOPs: per request
2 x (576 + 512) = 2176 FLOP per (row, key) pair, R = heads x q_len rows over P + q_len keys. The peak is the
chip's best dense bf16 tensor rate (wgmma on the H200), not the mma.sync rate the kernel uses: a floor no
kernel beats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddbench.gpus import GpuSpec
from ddbench.mla import BF16_BYTES, HEAD_DIM_QK, HEAD_DIM_V, KV_ROW_BYTES

FLOP_PER_ROW_KEY = 2 * (HEAD_DIM_QK + HEAD_DIM_V)  # 2176: S = QK^T over 576 dims, O += PV over 512
Q_ROW_BYTES = HEAD_DIM_QK * BF16_BYTES
OUT_ROW_BYTES = HEAD_DIM_V * BF16_BYTES


@dataclass(frozen=True)
class CaseShape:
    """What the floor and the Triton model need of a case: per-request prefixes, draft length, heads."""

    prefix_lens: tuple[int, ...]
    q_len: int  # the longest request's draft tokens
    heads: int
    q_lens: tuple[int, ...] = ()  # per request; () means q_len for every request

    def __post_init__(self) -> None:
        if not self.q_lens:
            object.__setattr__(self, "q_lens", (self.q_len,) * len(self.prefix_lens))

    @classmethod
    def of(cls, case: Any) -> CaseShape:
        """From a suite Case (or anything with prefix_lens, q_len, q_lens and heads_per_rank)."""
        return cls(tuple(case.prefix_lens), case.q_len, case.heads_per_rank, tuple(case.q_lens))

    @property
    def keys(self) -> tuple[int, ...]:
        """Keys per request: its prefix and its draft tokens."""
        return tuple(p + q for p, q in zip(self.prefix_lens, self.q_lens, strict=True))

    @property
    def batch_size(self) -> int:
        return len(self.prefix_lens)

    @property
    def kv_bytes(self) -> int:
        return sum(self.keys) * KV_ROW_BYTES

    @property
    def q_and_out_bytes(self) -> int:
        return sum(self.q_lens) * self.heads * (Q_ROW_BYTES + OUT_ROW_BYTES)

    @property
    def compulsory_bytes(self) -> int:
        return self.kv_bytes + self.q_and_out_bytes

    @property
    def flops(self) -> int:
        return sum(FLOP_PER_ROW_KEY * self.heads * q * k for q, k in zip(self.q_lens, self.keys, strict=True))


@dataclass(frozen=True)
class Floor:
    bytes_us: float
    flops_us: float

    @property
    def us(self) -> float:
        return max(self.bytes_us, self.flops_us)

    @property
    def bound(self) -> str:
        return "dram" if self.bytes_us >= self.flops_us else "tensor"

    def percent_of(self, modeled_us: float) -> float:
        """How close a (modeled) time comes to the floor: 100 % is at the floor."""
        return 100.0 * self.us / modeled_us if modeled_us > 0 else 0.0


def floor(shape: CaseShape, gpu: GpuSpec) -> Floor:
    return Floor(
        bytes_us=shape.compulsory_bytes / (gpu.dram_gbs * 1e3),
        flops_us=shape.flops / (gpu.dense_tensor_tflops * 1e6),
    )

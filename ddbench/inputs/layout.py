"""SGLang's extend layout for target-verify, tensor by tensor, under SGLang's own names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ddbench.poison import poison_
from ddbench.trees import Tree

TENSOR_FIELDS = (
    "q_extend",
    "k_extend",
    "v_extend",
    "o_extend",
    "k_buffer",
    "v_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "out_cache_loc",
    "custom_mask",
    "mask_indptr",
)


# What a backend reads and must leave as it found it (v_buffer is a view of k_buffer; o_extend is the output).
READ_ONLY_FIELDS = tuple(name for name in TENSOR_FIELDS if name not in ("o_extend", "v_buffer"))


@dataclass
class VerifyInputs:
    """Everything SGLang's Triton backend hands `extend_attention_fwd` on a target-verify step.

    Shapes: T = sum of q_len over requests, H = local (per-rank) heads, pool = rows of the KV pool.
    """

    q_extend: torch.Tensor  # (T, H, 576) bf16, [latent 512 || rope 64]
    k_extend: torch.Tensor  # (T, 1, 576) bf16, the draft tokens' keys, also in the pool at out_cache_loc
    v_extend: torch.Tensor  # (T, 1, 512) bf16, latent part of k_extend
    o_extend: torch.Tensor  # (T, H, 512) bf16, output buffer, poisoned before every call
    k_buffer: torch.Tensor  # (pool, 1, 576) bf16, unused rows are NaN
    v_buffer: torch.Tensor  # view k_buffer[..., :512], stride(0) = 576
    qo_indptr: torch.Tensor  # (bs+1) int32
    kv_indptr: torch.Tensor  # (bs+1) int32, prefix only
    # The next three may be longer than the lengths say, as a live server over-allocates them (docs/inputs.md,
    # "Buffers as a server passes them"): only kv_indptr[-1], T and mask_indptr[-1] entries mean anything.
    kv_indices: torch.Tensor  # (>= sum prefix) int64, pool slots of prefix tokens
    out_cache_loc: torch.Tensor  # (>= T) int64, pool slots of draft tokens
    custom_mask: torch.Tensor  # (>= sum q_len*(prefix+q_len)) bool/uint8, row stride prefix+q_len
    mask_indptr: torch.Tensor  # (bs+1) int64
    sm_scale: float
    max_len_extend: int
    page_size: int = 1
    is_causal: bool = True
    # What generated the tensors; not read by kernels, used by the reference checks and reports.
    prefix_lens: tuple[int, ...] = ()
    q_lens: tuple[int, ...] = ()
    trees: tuple[Tree, ...] = ()
    captured_output: torch.Tensor | None = None  # a replayed capture: what the serving kernel produced
    candidate_output: torch.Tensor | None = None  # a replayed breach capture: what the candidate produced

    @property
    def batch_size(self) -> int:
        return self.qo_indptr.numel() - 1

    @property
    def num_heads(self) -> int:
        return self.q_extend.shape[1]

    @property
    def device(self) -> torch.device:
        return self.q_extend.device

    def used_lengths(self) -> dict[str, int]:
        """How many leading entries of each over-allocatable tensor mean anything (reads them on the host:
        for checks and reports, never for a launch)."""
        return {
            "kv_indices": int(self.kv_indptr[-1]),
            "out_cache_loc": int(self.q_extend.shape[0]),
            "custom_mask": int(self.mask_indptr[-1]),
        }

    def tail_lengths(self) -> dict[str, int]:
        """Entries past the meaningful ones, by tensor (0: sized exactly)."""
        return {name: getattr(self, name).numel() - used for name, used in self.used_lengths().items()}

    def exact(self) -> VerifyInputs:
        """The same call with every tensor cut to its meaningful entries (views, no copy)."""
        used = self.used_lengths()
        return dataclasses.replace(self, **{name: getattr(self, name)[:n] for name, n in used.items()})

    def to(self, device: torch.device | str) -> VerifyInputs:
        moved = {name: getattr(self, name).to(device) for name in TENSOR_FIELDS if name != "v_buffer"}
        moved["v_buffer"] = moved["k_buffer"][..., : self.v_buffer.shape[-1]]
        for name in ("captured_output", "candidate_output"):
            if getattr(self, name) is not None:
                moved[name] = getattr(self, name).to(device)
        return dataclasses.replace(self, **moved)

    def fresh_output(self) -> torch.Tensor:
        """Poison the output buffer again; every backend call starts from it."""
        return poison_(self.o_extend)

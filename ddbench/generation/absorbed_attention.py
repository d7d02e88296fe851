"""MLA attention absorbed as SGLang serves it, common to the seeded model and a checkpoint's.

Per head the no-rope query goes through W_UK into the 512-wide latent, beside its rope part: 576-wide
queries. One KV row per token holds the normed latent and the rope key (576, bf16: the kernel's layout); V
is the latent, brought back per head through W_UV. A TP rank holds `heads_per_call` of the heads, so the
heads go to the verify attention one rank's group at a time, each call what one rank makes, and the
outputs are put back side by side.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ddbench.mla import KV_LORA_RANK

Attend = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
"""(layer, q (N, H, 576) bf16, kv (N, 576) bf16) -> the attention output (N, H, 512), any float dtype.
The caller decides where the keys come from (a pool, a drafter's own cache) and which kernel runs; H is
the heads of one call (one TP rank's)."""


def absorbed_attention(
    layer: int,
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    attend: Attend,
    heads_per_call: int,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """The attention's values (N, H * v_head_dim), float32.

    q_nope (N, H, nope), q_rope (N, H, 64) rotated; latent (N, 512) normed, k_rope (N, 64) rotated;
    w_uk (H, nope, 512), w_uv (H, 512, v). `dtype` is the queries' and KV rows' (the kernel's bf16; a test
    may ask for float32 to see the model's own error).
    """
    n, heads = q_nope.shape[0], q_nope.shape[1]
    q_latent = torch.einsum("nhd,hdl->nhl", q_nope, w_uk)
    q_full = torch.cat([q_latent, q_rope], dim=-1).to(dtype)
    kv = torch.cat([latent, k_rope], dim=-1).to(dtype)
    if heads_per_call == heads:
        outs = [_call(attend, layer, q_full, kv)]
    else:
        outs = [
            _call(attend, layer, q_full[:, start : start + heads_per_call].contiguous(), kv)
            for start in range(0, heads, heads_per_call)
        ]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    return torch.einsum("nhl,hlv->nhv", out, w_uv).reshape(n, -1)


def _call(attend: Attend, layer: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    out = attend(layer, q, kv).float()
    if out.shape != (q.shape[0], q.shape[1], KV_LORA_RANK):
        raise ValueError(f"layer {layer}: attention returned {tuple(out.shape)}")
    return out

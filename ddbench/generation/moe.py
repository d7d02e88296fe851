"""DeepSeek's mixture of experts: the router's top-k, the routed SwiGLU experts, the shared ones.

The router scores every routed expert from the token (float32): DeepSeek-V2 by softmax, then the top-k
(`greedy`), or the top-k within the `topk_group` groups of the highest best score (`group_limited_greedy`);
DeepSeek-V3 and Kimi K2 by sigmoid, choosing with `e_score_correction_bias` added (selection only) within
the `topk_group` groups of the highest top-2 sum (`noaux_tc`). The chosen scores are the weights,
normalized to sum 1 where `norm_topk_prob`, then times `routed_scaling_factor` (as SGLang applies it, to
both versions). Weights are kept as stored (bf16) and upcast where used; only the experts some token
chose are computed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ddbench.inputs.checkpoint_config import MoeConfig


def swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """down(silu(gate x) * up x), weights (out, in) as stored, upcast to x's dtype here."""
    dtype = x.dtype
    hidden = torch.nn.functional.silu(x @ gate.to(dtype).T) * (x @ up.to(dtype).T)
    return hidden @ down.to(dtype).T


def route(
    logits: torch.Tensor, moe: MoeConfig, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights (N, top_k), expert indices (N, top_k)) from the router's logits (N, experts), float32."""
    n = logits.shape[0]
    scores = logits.softmax(-1) if moe.scoring == "softmax" else logits.sigmoid()
    choice = scores if bias is None else scores + bias.float()
    if moe.method != "greedy":
        per_group = moe.experts // moe.n_group
        grouped = choice.view(n, moe.n_group, per_group)
        if moe.method == "noaux_tc":
            group_score = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)
        else:
            group_score = grouped.max(-1).values
        groups = group_score.topk(moe.topk_group, dim=-1).indices
        keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, groups, True)
        keep = keep.unsqueeze(-1).expand(n, moe.n_group, per_group).reshape(n, moe.experts)
        choice = choice.masked_fill(~keep, float("-inf"))
    indices = choice.topk(moe.top_k, dim=-1).indices
    weights = scores.gather(1, indices)
    if moe.norm_topk_prob and moe.top_k > 1:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * moe.routed_scaling_factor, indices


def moe_forward(x: torch.Tensor, weights: Mapping[str, torch.Tensor], moe: MoeConfig) -> torch.Tensor:
    """The MoE block's output for x (N, hidden) float32; `weights` named as under a layer's `mlp.`."""
    logits = x @ weights["gate.weight"].float().T
    scale, chosen = route(logits, moe, weights.get("gate.e_score_correction_bias"))
    out = torch.zeros_like(x)
    for expert in chosen.unique().tolist():
        rows, slot = (chosen == expert).nonzero(as_tuple=True)
        p = f"experts.{expert}."
        y = swiglu(
            x[rows],
            weights[p + "gate_proj.weight"],
            weights[p + "up_proj.weight"],
            weights[p + "down_proj.weight"],
        )
        out.index_add_(0, rows, y * scale[rows, slot, None])
    if moe.shared_experts:
        p = "shared_experts."
        out = out + swiglu(
            x, weights[p + "gate_proj.weight"], weights[p + "up_proj.weight"], weights[p + "down_proj.weight"]
        )
    return out

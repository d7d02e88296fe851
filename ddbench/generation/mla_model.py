"""A small decoder with DeepSeek-V3's absorbed MLA attention, its weights drawn from a seed.

The attention geometry is the real one, so every verify call has the kernel's layout: per head a
128-wide no-rope query absorbed through W_UK into the 512-wide latent, plus a 64-wide rope part (576 in
all); one shared KV row per token, [RMS-normed latent 512 || rope key 64], stored in bf16; V is the latent,
brought back to 128 per head through W_UV. Everything else (embedding, MLP, head) is small and runs in
float32, so two runs of the model differ only where their attention differs.

Random weights alone give flat attention and near-tied logits. Two choices make them behave like a
trained model's: every token's embedding shares a component, and the first token's (BOS) latent is turned
towards the queries' shared direction, so BOS is an attention sink and rows peak on it; the head is scaled
so the logits spread like a trained model's (top-2 margins mostly well above bf16 noise).
"""

from __future__ import annotations

import math

import torch

from ddbench.generation.absorbed_attention import Attend, absorbed_attention
from ddbench.generation.target import ModelShape
from ddbench.mla import KV_LORA_RANK, ROPE_DIM

NOPE_DIM = 128  # the no-rope query/key width per head before absorption (DeepSeek-V3)
V_HEAD_DIM = 128
BOS = 0
_SCORE_STD = 2.5  # the spread of attention scores (sm_scale included) the query scale aims at
_SINK_GAIN = 3.0  # how far the BOS latent leans towards the shared query direction
_LOGIT_STD = 8.0
_ROPE_BASE = 10000.0
_EPS = 1e-6


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + _EPS) * weight


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE over the last dimension (64) at integer positions (N,)."""
    half = x.shape[-1] // 2
    freq = _ROPE_BASE ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = positions.to(torch.float64)[:, None] * freq[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    while cos.dim() < x.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class AbsorbedMlaModel:
    """The seeded model: its heads are one rank's, so each layer makes one verify call."""

    bos = BOS
    kv_dtype = torch.bfloat16

    def __init__(self, shape: ModelShape, device: torch.device | str = "cpu") -> None:
        self.shape = shape
        g = torch.Generator().manual_seed(shape.seed)
        d, h, v = shape.hidden, shape.heads, shape.vocab

        def draw(*size: int, std: float) -> torch.Tensor:
            return torch.randn(*size, generator=g) * std

        shared = draw(d, std=0.8)
        embed = draw(v, d, std=1.0) + shared
        # q_latent entries ~ q_std; a normed latent key has entries ~ 1: scores ~ sm_scale*q_std*sqrt(512).
        q_std = _SCORE_STD / (shape.sm_scale * math.sqrt(KV_LORA_RANK))
        self.layers = []
        for _ in range(shape.layers):
            layer = {
                "attn_norm": torch.ones(d),
                "wq": draw(d, h * (NOPE_DIM + ROPE_DIM), std=d**-0.5),
                "w_uk": draw(h, NOPE_DIM, KV_LORA_RANK, std=q_std * NOPE_DIM**-0.5),
                "w_dkv": draw(d, KV_LORA_RANK, std=d**-0.5),
                "kv_norm": torch.ones(KV_LORA_RANK),
                "w_kr": draw(d, ROPE_DIM, std=0.5 * d**-0.5),
                "w_uv": draw(h, KV_LORA_RANK, V_HEAD_DIM, std=KV_LORA_RANK**-0.5),
                "wo": draw(h * V_HEAD_DIM, d, std=(h * V_HEAD_DIM) ** -0.5),
                "mlp_norm": torch.ones(d),
                "w_gate": draw(d, 2 * d, std=d**-0.5),
                "w_up": draw(d, 2 * d, std=d**-0.5),
                "w_down": draw(2 * d, d, std=(2 * d) ** -0.5),
            }
            self.layers.append(layer)
        embed[BOS] = self._sink_embedding(shared, self.layers[0])
        self.embed = embed
        self.final_norm = torch.ones(d)
        self.lm_head = draw(d, v, std=_LOGIT_STD * d**-0.5)
        self.to(device)

    def _sink_embedding(self, shared: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        """An embedding whose normed latent leans towards the direction every query shares."""
        h = self.shape.heads
        normed = _rms(shared, layer["attn_norm"])
        q_nope = (normed @ layer["wq"]).view(h, NOPE_DIM + ROPE_DIM)[:, :NOPE_DIM]
        common = torch.einsum("hd,hdl->l", q_nope, layer["w_uk"])
        common = common / common.norm()
        toward = layer["w_dkv"] @ common  # the embedding whose latent is closest to `common`
        return _SINK_GAIN * math.sqrt(self.shape.hidden) * toward / toward.norm()

    def to(self, device: torch.device | str) -> AbsorbedMlaModel:
        self.embed = self.embed.to(device)
        self.final_norm = self.final_norm.to(device)
        self.lm_head = self.lm_head.to(device)
        self.layers = [{k: w.to(device) for k, w in layer.items()} for layer in self.layers]
        return self

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """Logits (N, vocab) float32 of N tokens at their positions; `attend` runs each layer's attention."""
        h = self.shape.heads
        x = self.embed[tokens.long()]
        for index, layer in enumerate(self.layers):
            a = _rms(x, layer["attn_norm"])
            q = (a @ layer["wq"]).view(-1, h, NOPE_DIM + ROPE_DIM)
            latent = _rms(a @ layer["w_dkv"], layer["kv_norm"])
            v = absorbed_attention(
                index,
                q[..., :NOPE_DIM],
                rope(q[..., NOPE_DIM:], positions),
                latent,
                rope(a @ layer["w_kr"], positions),
                layer["w_uk"],
                layer["w_uv"],
                attend,
                heads_per_call=h,
                dtype=self.kv_dtype,
            )
            x = x + v @ layer["wo"]
            m = _rms(x, layer["mlp_norm"])
            x = x + (torch.nn.functional.silu(m @ layer["w_gate"]) * (m @ layer["w_up"])) @ layer["w_down"]
        return _rms(x, self.final_norm) @ self.lm_head

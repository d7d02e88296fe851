"""A DeepSeek-V2/V3 (Kimi K2) decoder on a checkpoint's weights, its attention absorbed as SGLang serves it.

Per layer: RMSNorm; the query through `q_proj` (V2-Lite) or `q_a_proj`, `q_a_layernorm`, `q_b_proj`; the
latent and rope key through `kv_a_proj_with_mqa` ([512 | 64], the latent through `kv_a_layernorm`);
`kv_b_proj` split per head into W_UK (nope x 512) and W_UV (512 x v) and absorbed; DeepSeek's interleaved
rope (YaRN where configured) on both rope parts; the verify attention one TP rank's head group at a time;
`o_proj`; RMSNorm; a dense SwiGLU MLP or the MoE. Then the final norm and `lm_head`. Everything runs in
float32 on weights kept as stored (bf16) and upcast where used; the KV rows and queries the verify call
sees are bf16, 576 wide, as in the kernel's layout.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ddbench.generation.absorbed_attention import Attend, absorbed_attention
from ddbench.generation.deepseek_rope import DeepseekRope
from ddbench.generation.moe import moe_forward, swiglu
from ddbench.generation.target import ModelShape
from ddbench.inputs.checkpoint_config import CheckpointConfig
from ddbench.inputs.checkpoint_tensors import EMBED, FINAL_NORM, HEAD_ROWS, LM_HEAD
from ddbench.mla import KV_LORA_RANK


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


class CheckpointMlaModel:
    def __init__(
        self,
        config: CheckpointConfig,
        tensors: Mapping[str, torch.Tensor],
        layers: list[dict[str, torch.Tensor]],
        heads_per_call: int,
        seed: int = 0,
        kv_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if heads_per_call < 1 or config.heads % heads_per_call:
            raise ValueError(f"{config.heads} heads do not split into groups of {heads_per_call}")
        self.config = config
        self.shape = ModelShape(
            len(layers), config.hidden, config.vocab, heads_per_call, config.sm_scale, seed
        )
        self.bos = config.bos
        self.rope = DeepseekRope(config.rope)
        self.kv_dtype = kv_dtype  # bf16, the kernel's layout; a test may ask for float32
        self.embed, self.final_norm, self.lm_head = tensors[EMBED], tensors[FINAL_NORM], tensors[LM_HEAD]
        self.layers = layers
        self._mlp = [
            {k.removeprefix("mlp."): w for k, w in layer.items() if k.startswith("mlp.")} for layer in layers
        ]

    @property
    def head_groups(self) -> int:
        """Verify calls a layer makes: one per TP rank's heads."""
        return self.config.heads // self.shape.heads

    def _attention(
        self, index: int, a: torch.Tensor, positions: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        c, w = self.config, self.layers[index]
        eps, nope, n = c.rms_norm_eps, c.qk_nope_head_dim, a.shape[0]
        if c.q_lora_rank is None:
            q = a @ w["self_attn.q_proj.weight"].float().T
        else:
            q_a = _rms(a @ w["self_attn.q_a_proj.weight"].float().T, w["self_attn.q_a_layernorm.weight"], eps)
            q = q_a @ w["self_attn.q_b_proj.weight"].float().T
        q = q.view(n, c.heads, c.qk_head_dim)
        compressed = a @ w["self_attn.kv_a_proj_with_mqa.weight"].float().T
        latent = _rms(compressed[:, :KV_LORA_RANK], w["self_attn.kv_a_layernorm.weight"], eps)
        kv_b = w["self_attn.kv_b_proj.weight"].float().view(c.heads, nope + c.v_head_dim, KV_LORA_RANK)
        values = absorbed_attention(
            index,
            q[..., :nope],
            self.rope(q[..., nope:], positions),
            latent,
            self.rope(compressed[:, KV_LORA_RANK:], positions),
            kv_b[:, :nope],
            kv_b[:, nope:].transpose(1, 2),
            attend,
            heads_per_call=self.shape.heads,
            dtype=self.kv_dtype,
        )
        return values @ w["self_attn.o_proj.weight"].float().T

    def _mlp_out(self, index: int, m: torch.Tensor) -> torch.Tensor:
        weights = self._mlp[index]
        if self.config.is_moe_layer(index):
            assert self.config.moe is not None
            return moe_forward(m, weights, self.config.moe)
        return swiglu(m, weights["gate_proj.weight"], weights["up_proj.weight"], weights["down_proj.weight"])

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """Logits (N, vocab) float32 of N tokens at their positions; `attend` runs each verify call."""
        eps = self.config.rms_norm_eps
        x = self.embed[tokens.long()].float()
        for index, w in enumerate(self.layers):
            x = x + self._attention(index, _rms(x, w["input_layernorm.weight"], eps), positions, attend)
            x = x + self._mlp_out(index, _rms(x, w["post_attention_layernorm.weight"], eps))
        h = _rms(x, self.final_norm, eps)
        rows = self.lm_head.shape[0]
        return torch.cat(
            [h @ self.lm_head[r : r + HEAD_ROWS].float().T for r in range(0, rows, HEAD_ROWS)], dim=-1
        )

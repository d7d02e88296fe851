"""The MLA attention geometry every layer shares (DeepSeek-V3, Kimi K2.x): one leaf module, no imports.

Absorbed MLA keeps one compressed KV row per token, `[512 latent || 64 rope]` bf16; V is its latent part.
"""

KV_LORA_RANK = 512
ROPE_DIM = 64
HEAD_DIM_QK = KV_LORA_RANK + ROPE_DIM  # 576: absorbed query/key width, [latent || rope]
HEAD_DIM_V = KV_LORA_RANK  # 512: V is the latent part of the same pool row
BF16_BYTES = 2
KV_ROW_BYTES = HEAD_DIM_QK * BF16_BYTES  # 1152 B per cached token (one KV head shared by all heads)

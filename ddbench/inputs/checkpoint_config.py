"""The config.json of a local DeepSeek-V2/V3 (or Kimi K2) checkpoint folder, read and checked field by field.

A generation case may decode with a real model's weights instead of seeded ones; this is what the suite
loader reads first, before any run: the folder must be local (ddbench never downloads), hold a config.json
of a model type it knows, and have the attention geometry the verify kernel serves (a 512-wide latent and a
64-wide rope part). Every problem is an InputError naming the config file and the field. No torch here:
the numbers only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.errors import InputError
from ddbench.mla import KV_LORA_RANK, ROPE_DIM
from ddbench.suite.load import read_json

CONFIG_FILE = "config.json"
MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")  # Kimi K2 is the DeepSeek-V3 architecture
MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB
DEFAULT_FP8_BLOCK = (128, 128)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REMOTE = ("http://", "https://", "hf://", "s3://", "gs://")
NEVER_DOWNLOADS = "ddbench never downloads weights: give a local folder"
# (scores, selection) pairs DeepSeek's routers use: V2 softmax with greedy or group-limited greedy top-k;
# V3 and Kimi K2 sigmoid with the bias-corrected, group-limited top-k ("noaux_tc").
ROUTERS = {("softmax", "greedy"), ("softmax", "group_limited_greedy"), ("sigmoid", "noaux_tc")}
_DEFAULT_ROUTER = {"deepseek_v2": ("softmax", "greedy")}
_V3_ROUTER = ("sigmoid", "noaux_tc")


@dataclass(frozen=True)
class Yarn:
    """DeepSeek's YaRN rope scaling: stretched low frequencies, and two attention-scale corrections."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float
    beta_slow: float
    mscale: float
    mscale_all_dim: float


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    interleaved: bool  # DeepSeek rotates pairs (x[2i], x[2i+1]); SGLang's is_neox_style=False
    yarn: Yarn | None


@dataclass(frozen=True)
class MoeConfig:
    experts: int
    shared_experts: int
    top_k: int
    intermediate: int
    scoring: str  # softmax (V2) or sigmoid (V3, Kimi K2)
    method: str  # greedy, group_limited_greedy (V2) or noaux_tc (V3, Kimi K2)
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    routed_scaling_factor: float
    first_k_dense_replace: int
    moe_layer_freq: int


@dataclass(frozen=True)
class CheckpointConfig:
    folder: Path
    model_type: str
    hidden: int
    vocab: int
    layers: int
    heads: int
    q_lora_rank: int | None  # None: one q_proj (DeepSeek-V2-Lite); else q_a_proj, its norm, q_b_proj
    qk_nope_head_dim: int
    v_head_dim: int
    rms_norm_eps: float
    intermediate: int  # the dense MLP's
    moe: MoeConfig | None
    bos: int
    rope: RopeConfig
    fp8_block: tuple[int, int]  # the blocks of weight_scale_inv, where a weight is stored in fp8

    @property
    def file(self) -> str:
        return str(self.folder / CONFIG_FILE)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + ROPE_DIM

    @property
    def sm_scale(self) -> float:
        """qk_head_dim^-0.5, times YaRN's mscale(factor, mscale_all_dim)^2 where the rope is scaled: the
        checkpoint's own softmax scale, the one its verify calls get."""
        scale = self.qk_head_dim**-0.5
        yarn = self.rope.yarn
        if yarn is not None and yarn.mscale_all_dim:
            m = yarn_mscale(yarn.factor, yarn.mscale_all_dim)
            scale *= m * m
        return scale

    def is_moe_layer(self, layer: int) -> bool:
        moe = self.moe
        return moe is not None and layer >= moe.first_k_dense_replace and layer % moe.moe_layer_freq == 0


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's attention-temperature correction: 0.1 * mscale * ln(factor) + 1 past a factor of 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


_MISSING = object()


class _Fields:
    """Typed reads of one JSON object; each problem an InputError naming the file and the field."""

    def __init__(self, data: dict[str, Any], file: str, prefix: str = "") -> None:
        self.data, self.file, self.prefix = data, file, prefix

    def fail(self, name: str, reason: str) -> InputError:
        return InputError(reason, file=self.file, path=self.prefix + name)

    def _get(self, name: str, default: Any) -> Any:
        if name in self.data:
            return self.data[name]
        if default is _MISSING:
            raise self.fail(name, "missing")
        return default

    def integer(self, name: str, default: Any = _MISSING, minimum: int = 1, nullable: bool = False) -> Any:
        value = self._get(name, default)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer{' or null' if nullable else ''}, got {value!r}")
        if value < minimum:
            raise self.fail(name, f"must be at least {minimum}, got {value}")
        return value

    def number(self, name: str, default: Any = _MISSING, positive: bool = True) -> float:
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(name, f"must be a number, got {value!r}")
        if positive and value <= 0:
            raise self.fail(name, f"must be above 0, got {value}")
        return float(value)

    def boolean(self, name: str, default: Any = _MISSING) -> bool:
        value = self._get(name, default)
        if not isinstance(value, bool):
            raise self.fail(name, f"must be true or false, got {value!r}")
        return value

    def string(self, name: str, default: Any = _MISSING) -> str:
        value = self._get(name, default)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, got {value!r}")
        return value

    def mapping(self, name: str) -> dict[str, Any] | None:
        value = self._get(name, None)
        if value is not None and not isinstance(value, dict):
            raise self.fail(name, f"must be an object or null, got {value!r}")
        return value


def checkpoint_folder(path: Path, written: str) -> Path:
    """The folder, if it is a local one holding a config.json; else why not (never a download)."""
    if written.startswith(_REMOTE):
        raise InputError(f"is not a local folder; {NEVER_DOWNLOADS}", file=written)
    if not path.exists():
        hub = _HUB_ID.match(written) and not written.startswith((".", "/"))
        reason = "no such folder" + (f" (it looks like a hub ID; {NEVER_DOWNLOADS})" if hub else "")
        raise InputError(reason, file=str(path))
    if not path.is_dir():
        raise InputError(
            "is not a folder; a checkpoint is a folder holding config.json and safetensors", file=str(path)
        )
    if not (path / CONFIG_FILE).is_file():
        raise InputError(f"no {CONFIG_FILE} in the checkpoint folder", file=str(path))
    return path


def read_checkpoint_config(folder: Path) -> CheckpointConfig:
    """The folder's config.json, every field ddbench uses checked (the folder itself already checked)."""
    file = str(folder / CONFIG_FILE)
    data = read_json(folder / CONFIG_FILE, what="checkpoint config", max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise InputError("must be a JSON object", file=file)
    f = _Fields(data, file)
    model_type = f.string("model_type")
    if model_type not in MODEL_TYPES:
        raise f.fail(
            "model_type", f"{model_type!r} is not a model type ddbench reads: {', '.join(MODEL_TYPES)}"
        )
    kv_lora_rank = f.integer("kv_lora_rank")
    if kv_lora_rank != KV_LORA_RANK:
        raise f.fail(
            "kv_lora_rank", f"is {kv_lora_rank}; the verify kernel serves a {KV_LORA_RANK}-wide latent only"
        )
    rope_dim = f.integer("qk_rope_head_dim")
    if rope_dim != ROPE_DIM:
        raise f.fail(
            "qk_rope_head_dim", f"is {rope_dim}; the verify kernel serves a {ROPE_DIM}-wide rope part only"
        )
    if f.string("hidden_act", "silu") != "silu":
        raise f.fail("hidden_act", f"is {data['hidden_act']!r}; DeepSeek's MLPs are SwiGLU (silu)")
    if f.boolean("attention_bias", False):
        raise f.fail("attention_bias", "is true; DeepSeek's attention projections have no bias")
    if f.boolean("tie_word_embeddings", False):
        raise f.fail("tie_word_embeddings", "is true; DeepSeek-V2/V3 checkpoints keep their own lm_head")
    if "q_lora_rank" not in data:
        raise f.fail("q_lora_rank", "missing (null for a model with one q_proj, as DeepSeek-V2-Lite)")
    vocab = f.integer("vocab_size")
    bos = f.integer("bos_token_id", minimum=0)
    if bos >= vocab:
        raise f.fail("bos_token_id", f"is {bos}, outside the vocabulary of {vocab}")
    return CheckpointConfig(
        folder=folder,
        model_type=model_type,
        hidden=f.integer("hidden_size"),
        vocab=vocab,
        layers=f.integer("num_hidden_layers"),
        heads=f.integer("num_attention_heads"),
        q_lora_rank=f.integer("q_lora_rank", nullable=True),
        qk_nope_head_dim=f.integer("qk_nope_head_dim"),
        v_head_dim=f.integer("v_head_dim"),
        rms_norm_eps=f.number("rms_norm_eps", 1e-6),
        intermediate=f.integer("intermediate_size"),
        moe=_moe(f, model_type),
        bos=bos,
        rope=_rope(f, model_type),
        fp8_block=_fp8_block(f),
    )


def _moe(f: _Fields, model_type: str) -> MoeConfig | None:
    experts = f.integer("n_routed_experts", None, nullable=True)
    if not experts:
        return None
    scoring, method = _DEFAULT_ROUTER.get(model_type, _V3_ROUTER)
    scoring, method = f.string("scoring_func", scoring), f.string("topk_method", method)
    if (scoring, method) not in ROUTERS:
        known = "; ".join(f"{s} scores with {m}" for s, m in sorted(ROUTERS))
        raise f.fail(
            "topk_method", f"{method!r} with {scoring!r} scores is not a router ddbench runs: {known}"
        )
    n_group = f.integer("n_group", 1, nullable=True) or 1
    topk_group = f.integer("topk_group", 1, nullable=True) or 1
    if method == "greedy":
        n_group = topk_group = 1  # ungrouped: whatever the config says about groups is not used
    top_k = f.integer("num_experts_per_tok")
    if experts % n_group:
        raise f.fail("n_group", f"{n_group} groups do not split {experts} routed experts")
    if topk_group > n_group:
        raise f.fail("topk_group", f"is {topk_group}, above n_group {n_group}")
    if top_k > topk_group * experts // n_group:
        raise f.fail("num_experts_per_tok", f"is {top_k}, above the experts of {topk_group} group(s)")
    return MoeConfig(
        experts=experts,
        shared_experts=f.integer("n_shared_experts", 0, minimum=0, nullable=True) or 0,
        top_k=top_k,
        intermediate=f.integer("moe_intermediate_size"),
        scoring=scoring,
        method=method,
        n_group=n_group,
        topk_group=topk_group,
        norm_topk_prob=f.boolean("norm_topk_prob", False),
        routed_scaling_factor=f.number("routed_scaling_factor", 1.0),
        first_k_dense_replace=f.integer("first_k_dense_replace", 0, minimum=0),
        moe_layer_freq=f.integer("moe_layer_freq", 1),
    )


def _rope(f: _Fields, model_type: str) -> RopeConfig:
    """`rope_theta` and `rope_scaling` as DeepSeek's configs write them, or transformers 5's
    `rope_parameters` (the theta inside) as its save_pretrained writes them."""
    interleaved = f.boolean("rope_interleave", True)
    if "rope_scaling" in f.data or "rope_parameters" not in f.data:
        name, scaling = "rope_scaling", f.mapping("rope_scaling")
        theta = f.number("rope_theta", 10000.0)
    else:
        name, scaling = "rope_parameters", f.mapping("rope_parameters")
        inner = _Fields(scaling or {}, f.file, "rope_parameters.")
        theta = inner.number("rope_theta", f.data.get("rope_theta", 10000.0))
    if not scaling:
        return RopeConfig(theta, interleaved, None)
    s = _Fields(scaling, f.file, f"{name}.")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return RopeConfig(theta, interleaved, None)
    if kind != "yarn":
        raise s.fail("type", f"{kind!r} rope scaling is not one ddbench reads: yarn (or none)")
    yarn = Yarn(
        factor=s.number("factor"),
        original_max_position_embeddings=s.integer("original_max_position_embeddings"),
        beta_fast=s.number("beta_fast", 32.0),
        beta_slow=s.number("beta_slow", 1.0),
        mscale=s.number("mscale", 1.0, positive=False),
        mscale_all_dim=s.number("mscale_all_dim", 0.0, positive=False),
    )
    return RopeConfig(theta, interleaved, yarn)


def _fp8_block(f: _Fields) -> tuple[int, int]:
    quant = f.mapping("quantization_config")
    if quant is None:
        return DEFAULT_FP8_BLOCK
    q = _Fields(quant, f.file, "quantization_config.")
    method = q.string("quant_method")
    if method != "fp8":
        raise q.fail("quant_method", f"{method!r} weights are not read; ddbench reads bf16 and block fp8")
    block = quant.get("weight_block_size", list(DEFAULT_FP8_BLOCK))
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise q.fail("weight_block_size", f"must be two positive integers, got {block!r}")
    return (block[0], block[1])

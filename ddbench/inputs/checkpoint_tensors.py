"""The tensors a DeepSeek-V2/V3 model of N layers reads from its checkpoint, shaped as its config implies.

One list, used twice: when the suite is loaded, each tensor is found in the folder's headers and its dtype
and shape checked (a missing or misshapen tensor is refused before any run) and the bytes a case will hold
are counted for its estimate; when the model is built, the same list says what to read and from where.
Only the first `layers` layers are listed, so a 16B model capped at 2 layers checks and reads those.

Weights stay in their stored dtype (bf16) and are upcast where they are used; a weight stored in fp8
(DeepSeek-V3, Kimi K2: float8_e4m3fn with a float32 `weight_scale_inv` per 128 x 128 block) is
dequantized to bf16 when it is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ddbench.errors import InputError
from ddbench.inputs.checkpoint_config import CheckpointConfig
from ddbench.inputs.safetensors_header import DTYPE_BYTES, FolderTensors, TensorEntry
from ddbench.mla import KV_LORA_RANK, ROPE_DIM

FP8 = "F8_E4M3"
SCALE_DTYPES = ("F32", "BF16")
LOADED_FP8_BYTES = 2  # dequantized to bf16
HEAD_ROWS = 8192  # the model upcasts lm_head this many vocabulary rows at a time
EMBED = "model.embed_tokens.weight"
FINAL_NORM = "model.norm.weight"
LM_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class PlannedTensor:
    name: str
    shape: tuple[int, ...]
    entry: TensorEntry
    scale: TensorEntry | None = None  # the fp8 weight's weight_scale_inv

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def loaded_bytes(self) -> int:
        """Held once read: the stored dtype's, or bf16 for a dequantized fp8 weight."""
        return self.numel * (LOADED_FP8_BYTES if self.scale is not None else DTYPE_BYTES[self.entry.dtype])


@dataclass(frozen=True)
class TensorPlan:
    config: CheckpointConfig
    tensors: dict[str, PlannedTensor]  # the model's (embedding, final norm, head)
    layers: tuple[dict[str, PlannedTensor], ...]  # each layer's, named without the `model.layers.<i>.` prefix

    @property
    def base_bytes(self) -> int:
        return sum(t.loaded_bytes for t in self.tensors.values())

    @property
    def layer_bytes(self) -> tuple[int, ...]:
        return tuple(sum(t.loaded_bytes for t in layer.values()) for layer in self.layers)

    @property
    def working_bytes(self) -> int:
        """The largest temporary while reading or running: a weight upcast to float32 where it is used (the
        head HEAD_ROWS rows at a time, the embedding by rows), an fp8 weight with its expanded scales."""
        largest = 4 * min(HEAD_ROWS, self.config.vocab) * self.config.hidden
        for layer in self.layers:
            for t in layer.values():
                largest = max(largest, t.numel * (8 if t.scale is not None else 4))
        return largest


def layer_prefix(layer: int) -> str:
    return f"model.layers.{layer}."


def layer_shapes(config: CheckpointConfig, layer: int) -> dict[str, tuple[int, ...]]:
    """The tensors of one decoder layer and their shapes (nn.Linear weights are (out, in))."""
    d, h = config.hidden, config.heads
    qk, nope, v = config.qk_head_dim, config.qk_nope_head_dim, config.v_head_dim
    out: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (d,),
        "post_attention_layernorm.weight": (d,),
    }
    if config.q_lora_rank is None:
        out["self_attn.q_proj.weight"] = (h * qk, d)
    else:
        r = config.q_lora_rank
        out |= {
            "self_attn.q_a_proj.weight": (r, d),
            "self_attn.q_a_layernorm.weight": (r,),
            "self_attn.q_b_proj.weight": (h * qk, r),
        }
    out |= {
        "self_attn.kv_a_proj_with_mqa.weight": (KV_LORA_RANK + ROPE_DIM, d),
        "self_attn.kv_a_layernorm.weight": (KV_LORA_RANK,),
        "self_attn.kv_b_proj.weight": (h * (nope + v), KV_LORA_RANK),
        "self_attn.o_proj.weight": (d, h * v),
    }
    moe = config.moe
    if moe is None or not config.is_moe_layer(layer):
        return out | _mlp("mlp.", d, config.intermediate)
    out["mlp.gate.weight"] = (moe.experts, d)
    if moe.method == "noaux_tc":
        out["mlp.gate.e_score_correction_bias"] = (moe.experts,)
    for e in range(moe.experts):
        out |= _mlp(f"mlp.experts.{e}.", d, moe.intermediate)
    if moe.shared_experts:
        out |= _mlp("mlp.shared_experts.", d, moe.intermediate * moe.shared_experts)
    return out


def _mlp(prefix: str, d: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}gate_proj.weight": (inter, d),
        f"{prefix}up_proj.weight": (inter, d),
        f"{prefix}down_proj.weight": (d, inter),
    }


def plan_tensors(config: CheckpointConfig, layers: int) -> TensorPlan:
    """Every tensor of the model's first `layers` layers found in the folder's headers, dtype and shape
    checked; an InputError names the file and the tensor of the first one that is wrong."""
    folder = FolderTensors(config.folder)
    base = {
        EMBED: (config.vocab, config.hidden),
        FINAL_NORM: (config.hidden,),
        LM_HEAD: (config.vocab, config.hidden),
    }
    tensors = {name: _planned(folder, config, name, shape) for name, shape in base.items()}
    planned = tuple(
        {
            name: _planned(folder, config, layer_prefix(i) + name, shape)
            for name, shape in layer_shapes(config, i).items()
        }
        for i in range(min(layers, config.layers))
    )
    return TensorPlan(config, tensors, planned)


def _planned(
    folder: FolderTensors, config: CheckpointConfig, name: str, shape: tuple[int, ...]
) -> PlannedTensor:
    entry = folder.find(name)
    file = str(entry.file)
    if entry.shape != shape:
        raise InputError(
            f"has shape {list(entry.shape)}; the config ({config.file}) implies {list(shape)}",
            file=file,
            path=name,
        )
    if entry.dtype not in DTYPE_BYTES:
        raise InputError(
            f"is stored as {entry.dtype}; ddbench reads BF16, F16, F32 and block FP8 weights",
            file=file,
            path=name,
        )
    if entry.dtype != FP8:
        return PlannedTensor(name, shape, entry)
    if len(shape) != 2 or not name.endswith(".weight"):
        raise InputError("is stored in FP8 but is not a 2-D weight with block scales", file=file, path=name)
    scale_name = name + "_scale_inv"
    if not folder.has(scale_name):
        raise InputError(f"is stored in FP8 without its {scale_name}", file=file, path=name)
    scale = folder.find(scale_name)
    b0, b1 = config.fp8_block
    blocks = (-(-shape[0] // b0), -(-shape[1] // b1))
    if scale.shape != blocks or scale.dtype not in SCALE_DTYPES:
        raise InputError(
            f"is {scale.dtype} of shape {list(scale.shape)}; {b0} x {b1} blocks of {list(shape)} need "
            f"{' or '.join(SCALE_DTYPES)} of shape {list(blocks)}",
            file=str(scale.file),
            path=scale_name,
        )
    return PlannedTensor(name, shape, entry, scale)

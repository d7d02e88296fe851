"""The target model from a local DeepSeek-V2/V3 (Kimi K2) checkpoint folder: read what it needs, no more.

The folder is checked as the suite loader checks it (ddbench.inputs.checkpoint_config: local, config.json,
the geometry the kernel serves; ddbench.inputs.checkpoint_tensors: every tensor of the first `layers`
layers present with its shape), then each of those tensors is read lazily from its shard (`safe_open`),
checked again, and kept in its stored dtype; an fp8 weight is dequantized to bf16 with its
`weight_scale_inv` blocks. Nothing is ever downloaded. Every problem is a CheckpointError naming the file
and the tensor (exit 2).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ddbench.errors import InputError
from ddbench.generation.checkpoint_model import CheckpointMlaModel
from ddbench.inputs.checkpoint_config import CheckpointConfig, checkpoint_folder, read_checkpoint_config
from ddbench.inputs.checkpoint_tensors import PlannedTensor, TensorPlan, plan_tensors

_TORCH_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F8_E4M3": torch.float8_e4m3fn,
}


class CheckpointError(InputError):
    """A checkpoint that cannot serve: the file, the field or tensor, and why (exit 2, no traceback)."""


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """bf16 of an fp8 weight (out, in) times its per-block scales (ceil(out/b0), ceil(in/b1))."""
    rows, cols = weight.shape
    scale = scale_inv.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return (weight.float() * scale).to(torch.bfloat16)


class _Reader:
    """Tensors read from their shards, one `safe_open` per shard, each checked against the plan."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = device
        self._open: dict[Path, object] = {}

    def _raw(self, file: Path, name: str, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        from safetensors import safe_open

        try:
            if file not in self._open:
                self._open[file] = safe_open(str(file), framework="pt", device="cpu")
            tensor = self._open[file].get_tensor(name)  # type: ignore[attr-defined]
        except Exception as err:  # safetensors' own errors: a truncated or rewritten shard
            raise CheckpointError(
                f"cannot read: {type(err).__name__}: {err}", file=str(file), path=name
            ) from None
        if tuple(tensor.shape) != shape or tensor.dtype != _TORCH_DTYPES[dtype]:
            raise CheckpointError(
                f"is {tensor.dtype} of shape {list(tensor.shape)}; expected {dtype} of shape {list(shape)} "
                "(the file changed since the suite was loaded?)",
                file=str(file),
                path=name,
            )
        return tensor

    def read(self, planned: PlannedTensor, block: tuple[int, int]) -> torch.Tensor:
        entry = planned.entry
        tensor = self._raw(entry.file, planned.name, planned.shape, entry.dtype)
        if planned.scale is not None:
            scale_name = planned.name + "_scale_inv"
            scale = self._raw(planned.scale.file, scale_name, planned.scale.shape, planned.scale.dtype)
            tensor = dequantize_fp8(tensor, scale, block)
        return tensor.to(self.device)


def read_weights(
    plan: TensorPlan, device: torch.device | str = "cpu"
) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """The model's tensors and each layer's (named without the layer prefix), as planned."""
    reader, block = _Reader(device), plan.config.fp8_block
    tensors = {name: reader.read(t, block) for name, t in plan.tensors.items()}
    layers = [{name: reader.read(t, block) for name, t in layer.items()} for layer in plan.layers]
    return tensors, layers


def read_config(folder: str | Path) -> CheckpointConfig:
    """The folder's config, checked; CheckpointError where it cannot serve."""
    try:
        return read_checkpoint_config(checkpoint_folder(Path(folder), str(folder)))
    except InputError as err:
        raise CheckpointError(err.reason, file=err.file, path=err.path) from None


def load_checkpoint_model(
    folder: str | Path,
    layers: int | None,
    heads_per_call: int,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> CheckpointMlaModel:
    """The model of the folder's first `layers` layers (None: all), one verify call per `heads_per_call`
    heads (a TP rank's: num_attention_heads / attention TP)."""
    config = read_config(folder)
    if heads_per_call < 1 or config.heads % heads_per_call:
        raise CheckpointError(
            f"{config.heads} heads do not split into verify calls of {heads_per_call}",
            file=config.file,
            path="num_attention_heads",
        )
    try:
        plan = plan_tensors(config, config.layers if layers is None else layers)
    except InputError as err:
        raise CheckpointError(err.reason, file=err.file, path=err.path) from None
    tensors, layer_weights = read_weights(plan, device)
    return CheckpointMlaModel(config, tensors, layer_weights, heads_per_call, seed)

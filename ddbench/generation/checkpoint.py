"""The target model from a local DeepSeek-V2/V3 (Kimi K2) checkpoint folder: read what it needs, no more.

The folder is checked as the suite loader checks it (ddbench.inputs.checkpoint_config: local, config.json,
the geometry the kernel serves; ddbench.inputs.checkpoint_tensors: every tensor of the first `layers`
layers present with its shape), then each of those tensors is read from its shard, its bytes alone (by the
offsets of the header, so a shard larger than memory, which `safe_open` would map whole, is no obstacle),
and kept in its stored dtype; an fp8 weight is dequantized to bf16 with its `weight_scale_inv` blocks.
Nothing is ever downloaded. Every problem is a CheckpointError naming the file and the tensor (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ddbench.errors import InputError
from ddbench.generation.checkpoint_model import CheckpointMlaModel
from ddbench.inputs.checkpoint_config import CheckpointConfig, checkpoint_folder, read_checkpoint_config
from ddbench.inputs.checkpoint_tensors import PlannedTensor, TensorPlan, plan_tensors
from ddbench.inputs.safetensors_header import TensorEntry

_CHUNK = 1 << 30  # bytes a read asks for (Linux returns at most about 2 GiB from one)
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
    """Tensors read from their shards by the byte ranges the headers give (one open file per shard; only the
    planned tensors' bytes are read, never the whole file mapped); a shard shorter than its header says is
    refused, naming the tensor."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = device
        self._fds: dict[Path, int] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _bytes(self, entry: TensorEntry, name: str) -> bytearray:
        file = entry.file
        try:
            if file not in self._fds:
                self._fds[file] = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            size = entry.end - entry.begin
            data, done = bytearray(size), 0
            view = memoryview(data)
            while done < size:
                got = os.preadv(self._fds[file], [view[done : done + _CHUNK]], entry.begin + done)
                if not got:
                    raise CheckpointError(
                        f"truncated: {done} of its {size} bytes read (the file changed after loading?)",
                        file=str(file),
                        path=name,
                    )
                done += got
            return data
        except OSError as err:
            raise CheckpointError(f"cannot read: {err.strerror or err}", file=str(file), path=name) from None

    def _tensor(self, entry: TensorEntry, name: str) -> torch.Tensor:
        data = self._bytes(entry, name)
        if not data:
            return torch.empty(entry.shape, dtype=_TORCH_DTYPES[entry.dtype])
        return torch.frombuffer(data, dtype=torch.uint8).view(_TORCH_DTYPES[entry.dtype]).reshape(entry.shape)

    def read(self, planned: PlannedTensor, block: tuple[int, int]) -> torch.Tensor:
        tensor = self._tensor(planned.entry, planned.name)
        if planned.scale is not None:
            scale = self._tensor(planned.scale, planned.name + "_scale_inv")
            tensor = dequantize_fp8(tensor, scale, block)
        return tensor.to(self.device)


def read_weights(
    plan: TensorPlan, device: torch.device | str = "cpu"
) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """The model's tensors and each layer's (named without the layer prefix), as planned."""
    reader, block = _Reader(device), plan.config.fp8_block
    try:
        tensors = {name: reader.read(t, block) for name, t in plan.tensors.items()}
        layers = [{name: reader.read(t, block) for name, t in layer.items()} for layer in plan.layers]
    finally:
        reader.close()
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

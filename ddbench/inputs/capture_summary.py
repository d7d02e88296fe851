"""What a capture holds, in numbers a person can check against the server it came from."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ddbench.errors import InputError
from ddbench.inputs.capture_file import Capture
from ddbench.inputs.capture_format import OUTPUT_TENSOR, SUFFIX
from ddbench.inputs.layout import TENSOR_FIELDS
from ddbench.mla import HEAD_DIM_V


def capture_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, folders expanded to their *.safetensors (sorted); an empty folder is an error."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
            if not found:
                raise InputError(f"no capture files (*{SUFFIX}) in this folder", file=str(path))
            out += found
        else:
            out.append(path)
    return out


def channel_magnitudes(values: torch.Tensor) -> dict[str, Any] | None:
    """The per-channel RMS of (..., channels) values: median, spread and the largest few, what a synthetic
    input style (docs/inputs.md) is compared on. None when there is nothing finite to measure."""
    flat = values.detach().to("cpu", torch.float64).reshape(-1, values.shape[-1])
    flat = flat[flat.isfinite().all(-1)]
    if flat.numel() == 0:
        return None
    rms = flat.square().mean(0).sqrt()
    median = float(rms.median())
    top = rms.sort(descending=True).values[:8]
    return {
        "channels": int(rms.numel()),
        "median_rms": median,
        "p90_over_median": float(rms.quantile(0.9)) / median if median > 0 else None,
        "largest_over_median": [round(float(v) / median, 2) for v in top] if median > 0 else None,
    }


def capture_summary(capture: Capture) -> dict[str, Any]:
    """Shapes, batch, heads, prefix lengths, q_lens, per-request tree statistics, scale, layout facts."""
    x, meta = capture.inputs, capture.metadata
    shapes = {
        name: list(getattr(x, name).shape) for name in TENSOR_FIELDS if name not in ("o_extend", "v_buffer")
    }
    shapes[OUTPUT_TENSOR] = list(capture.output.shape)
    used_slots = x.kv_indices[: x.used_lengths()["kv_indices"]].long()
    trees = [
        {"q_len": t.q_len, "nodes": t.q_len, "depth": t.max_depth, "width": t.width, "leaves": t.leaves}
        for t in x.trees
    ]
    try:
        size = capture.path.stat().st_size
    except OSError:
        size = None
    return {
        "file": str(capture.path),
        "bytes": size,
        "model": meta.get("model"),
        "layer": meta.get("layer"),
        "tp_rank": meta.get("tp_rank"),
        "tp_size": meta.get("tp_size"),
        "batch_size": x.batch_size,
        "heads": x.num_heads,
        "tokens": int(x.q_extend.shape[0]),
        "prefix_lens": list(x.prefix_lens),
        "q_lens": list(x.q_lens),
        "trees": trees if x.trees else None,
        "sm_scale": x.sm_scale,
        "page_size": x.page_size,
        "is_causal": x.is_causal,
        "max_len_extend": x.max_len_extend,
        "pool_rows": int(x.k_buffer.shape[0]),
        "latent_channels": channel_magnitudes(x.k_buffer[used_slots, 0, :HEAD_DIM_V]),
        "rope_channels": channel_magnitudes(x.k_buffer[used_slots, 0, HEAD_DIM_V:]),
        "output_channels": channel_magnitudes(capture.output),
        "shapes": shapes,
        # entries of the over-allocatable tensors that mean anything, and how many follow them unread
        "used": x.used_lengths(),
        "tails": x.tail_lengths(),
        "out_cache_loc": meta.get("out_cache_loc"),
        "source": meta.get("source"),
        "device": meta.get("device"),
        "triton_interpret": meta.get("triton_interpret"),
        "created": meta.get("created"),
        "call_index": meta.get("call_index"),
        "versions": meta.get("versions"),
    }

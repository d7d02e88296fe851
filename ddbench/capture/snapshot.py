"""Copy one call out of the serving process: its own small tensors and only the pool rows it reads.

Split in three so the server pays as little as possible on its own thread: `plan` reads the index tensors
(a few KB; the only synchronisation) and sizes the file before anything big is copied, `copy_inputs` /
`copy_output` queue asynchronous copies into pinned host memory on the call's stream (a plain clone on the
CPU), and `file_tensors` — on the writer thread — waits for them and assembles the compact pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ddbench.capture.compact import CompactPool, compact_pool
from ddbench.capture.context import CallSite, device_name, interpreted, timestamp, versions
from ddbench.inputs.capture_format import OUTPUT_TENSOR
from ddbench.suite.presets import HEAD_DIM_QK, HEAD_DIM_V

_HEADER_ALLOWANCE = 16 * 1024  # safetensors header with the metadata JSON, generously

# Arguments that must keep these values for a call to be the plain bf16 MLA target-verify the format holds.
_PLAIN = {
    "logit_cap": 0.0,
    "sinks": None,
    "window_kv_offsets": None,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "score_mod": None,
    "aux_tensors": None,
    "identity_kv_indices": False,
    "skip_prefix_custom_mask": True,
}


def unsupported(args: Mapping[str, Any]) -> str | None:
    """Why a target-verify call cannot be stored in the format, or None when it can."""
    q, k_ext, k_buffer, v_buffer = args["q_extend"], args["k_extend"], args["k_buffer"], args["v_buffer"]
    if q.dim() != 3 or q.shape[-1] != HEAD_DIM_QK or args["v_extend"].shape[-1] != HEAD_DIM_V:
        return f"not absorbed MLA (q_extend {tuple(q.shape)}, v_extend {tuple(args['v_extend'].shape)})"
    if k_ext.dim() != 3 or k_ext.shape[1] != 1:
        return f"k_extend {tuple(k_ext.shape)} is not one shared KV head"
    if k_buffer.dim() != 3 or tuple(k_buffer.shape[1:]) != (1, HEAD_DIM_QK):
        return f"k_buffer {tuple(k_buffer.shape)} is not (pool, 1, {HEAD_DIM_QK})"
    tensors = ("q_extend", "k_extend", "v_extend", "o_extend", "k_buffer")
    if any(args[name].dtype is not torch.bfloat16 for name in tensors):
        return "not all bf16: " + ", ".join(f"{n} {args[n].dtype}" for n in tensors)
    if v_buffer.data_ptr() != k_buffer.data_ptr() or v_buffer.stride(0) != k_buffer.stride(0):
        return "v_buffer is not a view of k_buffer[..., :512]"
    for name, plain in _PLAIN.items():  # a serving plugin runs this on every call: identity first
        value = args.get(name, plain)
        if value is plain:
            continue
        if plain is None or isinstance(value, torch.Tensor) or value != plain:
            return f"{name}={type(value).__name__ if isinstance(value, torch.Tensor) else repr(value)}"
    window = args.get("sliding_window_size", -1)
    if window is not None and window > 0:
        return f"sliding_window_size={window}"
    if (args.get("xai_temperature_len") or -1) > 0:
        return "xai_temperature_len is set"
    for name in ("k_scale", "v_scale"):
        if float(args[name]) != 1.0:
            return f"{name}={float(args[name])} (a scaled KV cache)"
    return None


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A private host copy; from a GPU, an asynchronous copy into pinned memory on the current stream."""
    if t.device.type == "cpu":
        return t.clone(memory_format=torch.contiguous_format)
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    return out


@dataclass
class CallSnapshot:
    plan: CompactPool
    total_q: int
    batch_size: int
    mask_size: int
    nbytes: int  # upper bound of the file this snapshot makes
    out_cache_loc_known: bool
    host: dict[str, torch.Tensor] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)
    kv_indices_dtype: torch.dtype = torch.int64

    @classmethod
    def plan_call(cls, args: Mapping[str, Any], site: CallSite, page_size: int, seed: int) -> CallSnapshot:
        """Read the indices (a small synchronisation) and plan the compact pool; nothing big is copied."""
        qo = args["qo_indptr"].cpu().long()
        bs = qo.numel() - 1
        kv = args["kv_indptr"][: bs + 1].cpu().long()
        mask_ends = args["mask_indptr"][: bs + 1].cpu().long()
        total_q, n_prefix, mask_size = int(qo[-1]), int(kv[-1]), int(mask_ends[-1])
        prefix_slots = args["kv_indices"][:n_prefix].cpu().long()
        k_buffer, k_extend = args["k_buffer"], args["k_extend"]
        draft = _real_out_cache_loc(site.out_cache_loc, k_buffer, k_extend[:total_q])
        plan = compact_pool(prefix_slots, draft, (qo[1:] - qo[:-1]).tolist(), page_size, seed)
        heads = args["q_extend"].shape[1]
        row = HEAD_DIM_QK * 2
        nbytes = (
            _HEADER_ALLOWANCE
            + plan.rows * row
            + total_q * (heads * row + row + HEAD_DIM_V * 2 + heads * HEAD_DIM_V * 2 + 8)
            + (n_prefix + 3 * (bs + 1)) * 8
            + mask_size
        )
        return cls(
            plan=plan,
            total_q=total_q,
            batch_size=bs,
            mask_size=mask_size,
            nbytes=nbytes,
            out_cache_loc_known=draft is not None,
            kv_indices_dtype=args["kv_indices"].dtype,
        )

    def metadata(
        self,
        call: Mapping[str, Any],
        layer: int | None,
        parallel: Mapping[str, int | None],
        index: int,
        model: str | None,
        source: str,
    ) -> dict[str, Any]:
        """The capture's metadata (docs/capture-format.md) for this call."""
        q = call["q_extend"]
        # With no sm_scale the kernel itself falls back to 1/sqrt(head dim): record what it used.
        sm_scale = call.get("sm_scale") or 1.0 / math.sqrt(q.shape[-1])
        return {
            "layer": layer,
            **parallel,
            "model": model,
            "sm_scale": float(sm_scale),
            "page_size": int(call.get("page_size") or 1),
            "is_causal": bool(call["is_causal"]),
            "max_len_extend": int(call["max_len_extend"]),
            "versions": versions(),
            "device": device_name(q),
            "triton_interpret": interpreted() and not q.is_cuda,
            "created": timestamp(),
            "call_index": index,
            "source": source,
            "out_cache_loc": "captured" if self.out_cache_loc_known else "synthesized",
            "pool": "compact-scattered",
        }

    def copy_inputs(self, args: Mapping[str, Any]) -> None:
        """Queue the copies of everything the call reads, before the call (it may overwrite nothing, but
        the caller may reuse its buffers right after)."""
        t, bs = self.total_q, self.batch_size
        k_buffer = args["k_buffer"]
        rows = k_buffer.index_select(0, self.plan.source_rows.to(k_buffer.device))
        sources = {
            "q_extend": args["q_extend"][:t],
            "k_extend": args["k_extend"][:t],
            "v_extend": args["v_extend"][:t],
            "qo_indptr": args["qo_indptr"],
            "kv_indptr": args["kv_indptr"][: bs + 1],
            "custom_mask": args["custom_mask"][: self.mask_size],
            "mask_indptr": args["mask_indptr"][: bs + 1],
            "prefix_rows": rows,
        }
        self.host = {name: _to_host(src) for name, src in sources.items()}
        self._record_event(k_buffer)

    def copy_output(self, o_extend: torch.Tensor) -> None:
        self.host[OUTPUT_TENSOR] = _to_host(o_extend[: self.total_q])
        self._record_event(o_extend)

    def _record_event(self, like: torch.Tensor) -> None:
        if like.is_cuda:
            event = torch.cuda.Event()
            event.record()
            self.events.append(event)

    def file_tensors(self) -> dict[str, torch.Tensor]:
        """The capture's tensors under SGLang's names (writer thread: waits for the copies first)."""
        for event in self.events:
            event.synchronize()
        h, plan = self.host, self.plan
        k_buffer = torch.full((plan.rows, 1, HEAD_DIM_QK), float("nan"), dtype=torch.bfloat16)
        k_buffer[plan.target_rows] = h["prefix_rows"]
        k_buffer[plan.out_cache_loc] = h["k_extend"]
        return {
            "q_extend": h["q_extend"],
            "k_extend": h["k_extend"],
            "v_extend": h["v_extend"],
            "k_buffer": k_buffer,
            "qo_indptr": h["qo_indptr"],
            "kv_indptr": h["kv_indptr"],
            "kv_indices": plan.kv_indices.to(self.kv_indices_dtype),
            "out_cache_loc": plan.out_cache_loc,
            "custom_mask": h["custom_mask"],
            "mask_indptr": h["mask_indptr"],
            OUTPUT_TENSOR: h[OUTPUT_TENSOR],
        }


def _real_out_cache_loc(
    candidate: torch.Tensor | None, k_buffer: torch.Tensor, k_extend: torch.Tensor
) -> torch.Tensor | None:
    """The caller's out_cache_loc on the host if it really holds this call's draft keys, else None."""
    if candidate is None or candidate.dim() != 1 or candidate.numel() != k_extend.shape[0]:
        return None
    if candidate.is_floating_point() or candidate.device != k_buffer.device:
        return None
    loc = candidate.long()
    if loc.numel() == 0:
        return loc.cpu()
    if int(loc.min()) < 0 or int(loc.max()) >= k_buffer.shape[0]:
        return None
    return loc.cpu() if torch.equal(k_buffer[loc], k_extend) else None

"""Best-effort facts about a captured call that its arguments do not carry: layer, draft slots, TP, model.

None of these may fail a capture, let alone a server: each returns None when it cannot tell.

- Layer and out_cache_loc: `extend_attention_fwd` takes neither, so they are read from the callers'
  frames, where SGLang's Triton backend has a local `layer` (a RadixAttention, `.layer_id`) and, one frame
  further up in `forward_extend`, a local `forward_batch` (`.out_cache_loc`). Another call path (a
  different backend, a refactored SGLang) simply gives None.
- TP rank and size: SGLang's parallel state when the process has initialised it; else the launcher's
  environment (RANK / WORLD_SIZE, or LOCAL_RANK).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata as importlib_metadata

import torch

# The wrapper's own frames, skipped when looking for the caller's locals.
_OWN_MODULES = frozenset({"ddbench.capture.installer", "ddbench.capture.recorder", "ddbench.capture.context"})
_MAX_FRAMES = 16  # SGLang's frames, beneath a capture wrapper or the serving plugin's hook


@dataclass(frozen=True)
class CallSite:
    layer_id: int | None
    out_cache_loc: torch.Tensor | None


def call_site() -> CallSite:
    """Walk up from the wrapper through SGLang's frames looking for `layer` and `forward_batch` locals."""
    layer_id: int | None = None
    out_cache_loc: torch.Tensor | None = None
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None or (layer_id is not None and out_cache_loc is not None):
            break
        if frame.f_globals.get("__name__") not in _OWN_MODULES:
            local = frame.f_locals
            if layer_id is None:
                candidate = getattr(local.get("layer"), "layer_id", None)
                if isinstance(candidate, int) and not isinstance(candidate, bool):
                    layer_id = candidate
            if out_cache_loc is None:
                candidate = getattr(local.get("forward_batch"), "out_cache_loc", None)
                if isinstance(candidate, torch.Tensor):
                    out_cache_loc = candidate
        frame = frame.f_back
    return CallSite(layer_id, out_cache_loc)


def _sglang_parallel() -> dict[str, int | None]:
    state = sys.modules.get("sglang.srt.distributed.parallel_state")
    out: dict[str, int | None] = {
        "tp_rank": None,
        "tp_size": None,
        "attn_tp_rank": None,
        "attn_tp_size": None,
    }
    if state is None:  # never import it here: only a process that set up TP has meaningful answers
        return out
    getters = {
        "tp_rank": "get_tensor_model_parallel_rank",
        "tp_size": "get_tensor_model_parallel_world_size",
        "attn_tp_rank": "get_attn_tensor_model_parallel_rank",
        "attn_tp_size": "get_attn_tensor_model_parallel_world_size",
    }
    for key, name in getters.items():
        try:
            out[key] = int(getattr(state, name)())
        except Exception:  # not initialised (yet), or renamed
            out[key] = None
    return out


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def parallel_info() -> dict[str, int | None]:
    """tp_rank, tp_size, attn_tp_rank, attn_tp_size: SGLang's parallel state, else the environment."""
    info = _sglang_parallel()
    if info["tp_rank"] is None:
        info["tp_rank"] = _env_int("RANK", "LOCAL_RANK")
    if info["tp_size"] is None:
        info["tp_size"] = _env_int("WORLD_SIZE", "LOCAL_WORLD_SIZE")
    return info


def served_model() -> str | None:
    """The server's model path when SGLang's runtime context knows it."""
    context = sys.modules.get("sglang.srt.runtime_context")
    try:
        value = context.get_server_args().model_path if context is not None else None
    except Exception:
        return None
    return value if isinstance(value, str) else None


@lru_cache(maxsize=1)
def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("sglang", "torch", "triton", "ddbench"):
        try:
            out[package] = importlib_metadata.version(package)
        except importlib_metadata.PackageNotFoundError:
            out[package] = None
    return out


def device_name(tensor: torch.Tensor) -> str:
    if tensor.is_cuda:
        try:
            return torch.cuda.get_device_name(tensor.device)
        except Exception:
            return "cuda"
    return f"cpu ({platform.machine()})"


def timestamp() -> str:
    """Now in UTC, or SOURCE_DATE_EPOCH when set (reproducible captures, as in reproducible builds)."""
    fixed = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    moment = (
        datetime.fromtimestamp(int(fixed), timezone.utc) if fixed.isdigit() else datetime.now(timezone.utc)
    )
    return moment.isoformat(timespec="seconds")


def interpreted() -> bool:
    """Whether Triton ran the kernel under its interpreter: such outputs differ from compiled ones."""
    return os.environ.get("TRITON_INTERPRET") == "1"

"""One call of SGLang's `extend_attention_fwd` as the plugin sees it: its arguments by name, cheaply, and
the `VerifyInputs` a backend runs on (the caller's tensors themselves, nothing copied).

Binding through `inspect.Signature.bind` costs several microseconds a call; the parameter positions are
read once per function instead, so telling a target-verify call from the others is a tuple lookup.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ddbench.inputs.layout import VerifyInputs
from ddbench.suite.presets import HEAD_DIM_V

_NO_DEFAULT = inspect.Parameter.empty
_EMPTY: dict[torch.device, torch.Tensor] = {}


def _no_slots(device: torch.device) -> torch.Tensor:
    empty = _EMPTY.get(device)
    if empty is None:
        empty = _EMPTY[device] = torch.empty(0, dtype=torch.int64, device=device)
    return empty


class ArgumentLayout:
    """Where each parameter of one function sits, and its default."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        parameters = list(inspect.signature(fn).parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) for p in parameters):
            raise TypeError(f"{fn.__qualname__}: expected plain named parameters")
        self.names = tuple(p.name for p in parameters)
        self.positional = sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters)
        self.position = {name: i for i, name in enumerate(self.names)}
        self.defaults = {p.name: p.default for p in parameters if p.default is not _NO_DEFAULT}

    def get(self, name: str, args: tuple, kwargs: dict) -> Any:
        if name in kwargs:
            return kwargs[name]
        index = self.position[name]
        return args[index] if index < len(args) else self.defaults.get(name)

    def arguments(self, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """Every argument by name, defaults filled in (for eligibility and captures); None for a call the
        function would refuse (too many positions, an unknown or repeated name, a required one missing)."""
        if len(args) > self.positional:
            return None
        arguments = dict(self.defaults)
        arguments.update(zip(self.names, args, strict=False))  # trailing parameters come as defaults
        for name, value in kwargs.items():
            if name not in self.position or self.position[name] < len(args):
                return None
            arguments[name] = value
        return arguments if len(arguments) == len(self.names) else None

    def with_output(self, args: tuple, kwargs: dict, out: torch.Tensor) -> tuple[tuple, dict]:
        """The same call writing into `out` instead of its o_extend."""
        if "o_extend" in kwargs:
            return args, {**kwargs, "o_extend": out}
        index = self.position["o_extend"]
        return (*args[:index], out, *args[index + 1 :]), kwargs


def verify_inputs(
    call: dict[str, Any], out: torch.Tensor, out_cache_loc: torch.Tensor | None
) -> VerifyInputs:
    """The call as `VerifyInputs` writing into `out`. `out_cache_loc` is not an argument of the function
    (the kernel reads the draft keys from k_extend): the caller's when it was found, else empty."""
    k_buffer = call["k_buffer"]
    return VerifyInputs(
        q_extend=call["q_extend"],
        k_extend=call["k_extend"],
        v_extend=call["v_extend"],
        o_extend=out,
        k_buffer=k_buffer,
        v_buffer=call["v_buffer"] if call["v_buffer"].shape[-1] == HEAD_DIM_V else k_buffer[..., :HEAD_DIM_V],
        qo_indptr=call["qo_indptr"],
        kv_indptr=call["kv_indptr"],
        kv_indices=call["kv_indices"],
        out_cache_loc=out_cache_loc if out_cache_loc is not None else _no_slots(k_buffer.device),
        custom_mask=call["custom_mask"],
        mask_indptr=call["mask_indptr"],
        sm_scale=float(call.get("sm_scale") or call["q_extend"].shape[-1] ** -0.5),
        max_len_extend=int(call["max_len_extend"]),
        page_size=int(call.get("page_size") or 1),
        is_causal=bool(call["is_causal"]),
    )

"""The one small protocol every backend implements, built-in or a user's own kernel.

A backend is any object with a `name`, an `availability()` that says why it cannot run here, and
`run(inputs) -> output` taking SGLang's extend layout (`ddbench.inputs.VerifyInputs`, tensors under
SGLang's names) and returning the (T, H, 512) attention output. Writing into `inputs.o_extend` (poisoned
with NaN before every call) and returning it is the usual way; returning a fresh tensor is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ddbench.inputs.layout import VerifyInputs


@dataclass(frozen=True)
class Availability:
    ok: bool
    detail: str = ""  # why not, when not ok; what it runs on, when ok

    @classmethod
    def yes(cls, detail: str = "") -> Availability:
        return cls(True, detail)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@runtime_checkable
class Backend(Protocol):
    name: str

    def availability(self) -> Availability: ...

    def run(self, inputs: VerifyInputs) -> torch.Tensor: ...


def preferred_device() -> torch.device:
    """Where a run puts its inputs: the GPU when there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

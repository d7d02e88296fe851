"""The one small protocol every backend implements, built-in or a user's own kernel.

A backend is any object with a `name`, an `availability()` that says why it cannot run here, and
`run(inputs) -> output` taking SGLang's extend layout (`ddbench.inputs.VerifyInputs`, tensors under
SGLang's names) and returning the (T, H, 512) attention output. Writing into `inputs.o_extend` (poisoned
with NaN before every call) and returning it is the usual way; returning a fresh tensor is allowed.

Two optional parts, both declared rather than probed:

- `prepare(inputs) -> Launch`: the work done once per input set (marshaling, launch plan, workspace),
  returning a `Launch` that does only what is to be timed and returns the output tensor. `run(inputs)` is
  then `prepare(inputs)()`. In serving the preparation runs once per forward and the kernel once per layer,
  so the two are timed apart. Callers go through `prepared(backend, inputs)`, which falls back to
  `lambda: backend.run(inputs)` for a backend without `prepare`. A backend declaring the LSE output takes
  the keyword `lse=` in `prepare` (when it has one) and in `run`.
- `prepare_replayable(inputs) -> Launch`: a launch prepared once for a call's buffers (over-allocated as a
  live server's, docs/inputs.md) that later calls are written into, as a CUDA graph captured at the first
  call is replayed: every launch reads the lengths the buffers hold then, and nothing prepared depends on
  them (no host synchronisation). `replayable(backend, inputs)` falls back to calling `run` on the buffers
  each time, which is right for any backend that reads the lengths at each call (SGLang's Triton kernel,
  the references).
- `launch_in_capture(inputs) -> output`: launch now, on the caller's stream, while the caller captures a
  CUDA graph of its own (SGLang's graph runner): planned from the buffers' shapes, every length read on the
  device, so each replay of the caller's graph is right at the lengths it then holds. A backend without it
  is never recorded into someone else's graph.
- `unsupported(inputs) -> str | None`: why this backend cannot run these inputs (another device, a shape it
  lacks), checked before a server hands it a live call; `unsupported_by(backend, inputs)` reads it.
- `capabilities: Capabilities`: what else the backend offers (an LSE output; the mistake a deliberately
  wrong backend plants). `capabilities(backend)` reads it, with the default for backends that declare none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ddbench.inputs.layout import VerifyInputs

Launch = Callable[[], torch.Tensor]


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


@dataclass(frozen=True)
class Capabilities:
    """Optional features a backend declares, so no caller has to guess them from keywords or attributes."""

    lse: bool = False  # `prepare`/`run` take `lse=`: a (T, H) float32 buffer filled with the natural-log LSE
    hypothesis: str | None = None  # a deliberately wrong backend (the self-test's mutants): its mistake


NO_CAPABILITIES = Capabilities()


@runtime_checkable
class Backend(Protocol):
    name: str

    def availability(self) -> Availability: ...

    def run(self, inputs: VerifyInputs) -> torch.Tensor: ...


@runtime_checkable
class TwoPhaseBackend(Backend, Protocol):
    """A backend whose per-input-set preparation is kept out of the timed launch."""

    def prepare(self, inputs: VerifyInputs) -> Launch: ...


@runtime_checkable
class ReplayableBackend(Backend, Protocol):
    """A backend whose launch, prepared once on a call's buffers, serves each later call written into them."""

    def prepare_replayable(self, inputs: VerifyInputs) -> Launch: ...


@runtime_checkable
class GraphCapturableBackend(Backend, Protocol):
    """A backend that can be recorded into a CUDA graph its caller is capturing."""

    def launch_in_capture(self, inputs: VerifyInputs) -> torch.Tensor: ...


def unsupported_by(backend: object, inputs: VerifyInputs) -> str | None:
    """Why `backend` declares it cannot run `inputs`; None when it declares nothing against them."""
    check = getattr(backend, "unsupported", None)
    return check(inputs) if callable(check) else None


def capabilities(backend: object) -> Capabilities:
    """What `backend` declares; the defaults (no LSE, no planted mistake) when it declares nothing."""
    declared = getattr(backend, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else NO_CAPABILITIES


def prepared(backend: Backend, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
    """The launch to time for `inputs`: the backend's own `prepare`, else a call of its `run`.

    `lse` is passed on only to a backend that declares the LSE output; asking another one is a ValueError.
    """
    if lse is not None and not capabilities(backend).lse:
        raise ValueError(f"backend {backend.name} does not declare an LSE output")
    extra = {} if lse is None else {"lse": lse}
    if isinstance(backend, TwoPhaseBackend):
        return backend.prepare(inputs, **extra)
    return lambda: backend.run(inputs, **extra)


def replayable(backend: Backend, buffers: VerifyInputs) -> Launch:
    """The launch a CUDA-graph group replays over `buffers`: the backend's own `prepare_replayable`, else a
    call of its `run` on the buffers at each launch."""
    if isinstance(backend, ReplayableBackend):
        return backend.prepare_replayable(buffers)
    return lambda: backend.run(buffers)


def preferred_device() -> torch.device:
    """Where a run puts its inputs: the GPU when there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

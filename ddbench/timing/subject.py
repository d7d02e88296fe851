"""What the sampler times for one name: plain callables, so timing knows nothing of backends or inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingSubject:
    """One launch per input set (it does only the timed work and returns its output tensor) and, per set,
    what must run before each sample and outside the clock: re-poisoning the output."""

    launches: Sequence[Callable[[], torch.Tensor]]
    before: Sequence[Callable[[], object]]
    prepare_us: float | None = None  # reported beside the kernel's time; not part of it

    def __post_init__(self) -> None:
        if not self.launches or len(self.launches) != len(self.before):
            raise ValueError(
                f"a timing subject needs one before-hook per launch ({len(self.launches)} launches, "
                f"{len(self.before)} hooks)"
            )

"""Judge one live call: the candidate's output against SGLang's Triton output, with `ddbench run`'s own
figures and bounds (a bound set's bounds against triton; a server has no higher-precision truth at hand)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddbench.metrics.figures import ParityFigures, parity_figures
from ddbench.metrics.verdict import Verdict, judge
from ddbench.suite.bound_sets import BOUND_SETS
from ddbench.suite.from_json import bound_from_json
from ddbench.suite.model import ParityBound

TRITON = "triton"


def serving_bounds(set_name: str) -> tuple[ParityBound, ...]:
    """The set's bounds against triton (those against the fp64 reference need a truth a server lacks)."""
    return tuple(bound_from_json(b) for b in BOUND_SETS[set_name] if b["against"] == TRITON)


@dataclass(frozen=True)
class Comparison:
    figures: ParityFigures
    verdicts: tuple[Verdict, ...]

    @property
    def breached(self) -> bool:
        return any(v.failed for v in self.verdicts)

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(reason for v in self.verdicts for reason in v.reasons)


def compare(
    candidate: torch.Tensor, triton: torch.Tensor, bounds: tuple[ParityBound, ...], name: str
) -> Comparison:
    """Figures of `candidate` against `triton` and the verdict of every bound (NaN, Inf and unwritten
    elements fail them all, as in `ddbench run`)."""
    figures = parity_figures(candidate, triton)
    return Comparison(figures, tuple(judge(bound, figures, name) for bound in bounds))

"""Judge parity figures against a suite's bound: pass, or fail with every reason."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddbench.metrics.figures import ParityFigures
from ddbench.metrics.status import Status
from ddbench.suite.model import LIMIT_NAMES, ParityBound

PASS, FAIL, ERROR, SKIPPED = Status.PASS, Status.FAIL, Status.ERROR, Status.SKIPPED


@dataclass(frozen=True)
class Verdict:
    status: Status
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        return self.status in (FAIL, ERROR)


def judge(
    bound: ParityBound, figures: ParityFigures, candidate: str, peer: ParityFigures | None = None
) -> Verdict:
    """`peer`: the figures of `bound.no_worse_than` against the same backend, for the relative limit."""
    reasons = []
    if figures.unwritten:
        reasons.append(f"{figures.unwritten} output elements never written")
    nonfinite = figures.nan + figures.inf - figures.unwritten
    if nonfinite:
        reasons.append(f"{nonfinite} NaN/Inf in {candidate} output")
    if figures.against_nonfinite:
        reasons.append(f"{figures.against_nonfinite} NaN/Inf in {bound.against} output")
    for name in LIMIT_NAMES:
        limit = bound.limit(name)
        value = getattr(figures, name)
        if limit is not None and not value <= limit:
            reasons.append(f"{name} {value:.4g} > {limit:g}")
    if bound.no_worse_than and peer is not None:
        allowed = peer.max_row_ulp + bound.margin_row_ulp
        if not figures.max_row_ulp <= allowed:
            reasons.append(
                f"max_row_ulp {figures.max_row_ulp:.4g} > {bound.no_worse_than}'s {peer.max_row_ulp:.4g}"
                f" + {bound.margin_row_ulp:g}"
            )
    return Verdict(FAIL if reasons else PASS, tuple(reasons))

"""How well a predicted output matches a candidate's, and the rule that turns a ranking into a verdict.

The match is taken on what a failed kernel actually leaves behind: NaN elements (a stray read of a
poisoned pool row makes whole rows NaN, a never-written column one element per row) are compared as a
pattern, element by element, finite elements numerically (relative L2 and the row-scaled bf16 ULPs of
docs/results.md). Rows a hypothesis leaves undefined (nothing visible) accept 0 or NaN alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ddbench.explain.attention import Prediction
from ddbench.metrics.ulp import bf16_spacing, channel_scaled_ulps

EXPLAINED, MATCHES_REFERENCE, UNEXPLAINED = "explained", "matches-reference", "unexplained"

# bf16 noise: a bf16 kernel lands within ~0.3 % relative L2 and ~0.2 mean row-scaled ULPs of an exact
# result (measured on the shipped suites); the limits leave room for a split-KV kernel's own error, no more.
NOISE_REL_L2 = 0.02
NOISE_MEAN_ROW_ULP = 1.0
FAR_BETTER = 10.0
# the limits of a bound that a Match measures
BOUND_FIGURES = ("max_row_ulp", "mean_row_ulp", "rel_l2", "max_channel_ulp")

RULE = (
    f"explained: the best hypothesis that changes the output on this workload matches the candidate within "
    f"bf16 noise (rel L2 <= {NOISE_REL_L2:g}, mean row-scaled error <= {NOISE_MEAN_ROW_ULP:g} ULP, the same "
    f"NaN rows) and scores at least {FAR_BETTER:g}x better than the correct output "
    "(score = rel L2 + fraction of elements whose NaN-ness differs); for a pair that failed its bound, the "
    "hypothesis must also reproduce the output within that bound's limits, and then it suffices that the "
    "correct output does not (a hypothesis counts as changing the output when its own output is outside "
    "the bound); the output never 'matches the reference'; matches-reference: the correct output itself is "
    "within that noise; otherwise no hypothesis explains it"
)


def measures(bound: Mapping[str, float] | None) -> bool:
    """Whether `bound` sets a limit a Match measures."""
    return any(k in BOUND_FIGURES for k in bound or {})


@dataclass(frozen=True)
class Match:
    rel_l2: float  # on elements finite on both sides
    max_row_ulp: float
    mean_row_ulp: float
    max_channel_ulp: float  # in ULPs of each channel's largest |element| (a mistake in the small channels)
    nan_mismatch: float  # fraction of elements finite on one side only
    rows: int  # rows compared numerically

    @property
    def score(self) -> float:
        return self.rel_l2 + self.nan_mismatch

    def within_noise(self) -> bool:
        return (
            self.nan_mismatch == 0.0
            and self.rel_l2 <= NOISE_REL_L2
            and self.mean_row_ulp <= NOISE_MEAN_ROW_ULP
        )

    def within(self, bound: Mapping[str, float] | None) -> bool:
        """Within bf16 noise and, when the pair's bound is given, within each of its limits this match
        measures (BOUND_FIGURES): what 'reproduces the output' means for a failed pair."""
        return self.within_noise() and self.within_limits(bound)

    def within_limits(self, bound: Mapping[str, float] | None) -> bool:
        """The same NaN pattern and each limit of `bound` this match measures (True when it sets none)."""
        limits = {k: v for k, v in (bound or {}).items() if k in BOUND_FIGURES}
        return self.nan_mismatch == 0.0 and all(getattr(self, k) <= v for k, v in limits.items())

    def to_json(self) -> dict[str, float | int]:
        return {
            "score": _round(self.score),
            "rel_l2": _round(self.rel_l2),
            "max_row_ulp": _round(self.max_row_ulp),
            "mean_row_ulp": _round(self.mean_row_ulp),
            "max_channel_ulp": _round(self.max_channel_ulp),
            "nan_mismatch": _round(self.nan_mismatch),
            "rows": self.rows,
        }


def _round(value: float) -> float:
    return float(f"{value:.4g}")


@dataclass(frozen=True)
class Prepared:
    """One side of a match, converted once: float64 on the CPU, its NaN/Inf elements, the rows' bf16 ULP."""

    values: torch.Tensor  # (T, H, D) float64, non-finite elements zeroed
    bad: torch.Tensor  # (T, H, D) non-finite elements: NaN-ness is compared element by element
    free: torch.Tensor  # (T, H) rows a prediction leaves undefined (all False for a candidate)
    ulp: torch.Tensor  # (T, H) bf16 spacing at the row's largest finite magnitude
    norm2: torch.Tensor  # (T, H) squared L2 norm of each row's finite elements

    @classmethod
    def of(cls, output: torch.Tensor, free: torch.Tensor | None = None) -> Prepared:
        values = output.detach().to("cpu", torch.float64)
        bad = ~values.isfinite()
        values = values.masked_fill(bad, 0.0)
        rows = bad.shape[:-1]
        free = free.detach().cpu() if free is not None else torch.zeros(rows, dtype=torch.bool)
        return cls(values, bad, free, bf16_spacing(values.abs().amax(-1)), values.square().sum(-1))

    @classmethod
    def of_prediction(cls, prediction: Prediction) -> Prepared:
        return cls.of(prediction.output, prediction.free)


def match_prepared(c: Prepared, p: Prepared) -> Match:
    """`c` (a candidate) against `p` (what a hypothesis, or the correct computation, says it should be).

    NaN-ness is compared element by element (one never-written column is 1/512 of a row, not a NaN row);
    the numbers are compared on the elements finite on both sides."""
    forgiven = (p.free & c.bad.any(-1))[..., None]  # an undefined row: a kernel's NaN is as good as its 0
    mismatch = (c.bad != p.bad) & ~forgiven
    compared = ~c.bad & ~p.bad
    absdiff = (c.values - p.values).abs() * compared
    err2 = float(absdiff.square().sum())
    denominator = float((p.values.square() * compared).sum()) or float((c.values.square() * compared).sum())
    rel = (err2 / denominator) ** 0.5 if denominator > 0 else 0.0
    scaled = compared.any(-1) & ~p.free  # ULPs of an undefined row's 0 mean nothing
    row_max = (absdiff.amax(-1) / p.ulp)[scaled]
    row_sum = (absdiff.sum(-1) / p.ulp)[scaled]
    channel = channel_scaled_ulps(c.values * compared, p.values * compared)[scaled]
    elements = int(compared.sum(-1)[scaled].sum())
    return Match(
        rel_l2=rel,
        max_row_ulp=float(row_max.max()) if row_max.numel() else 0.0,
        mean_row_ulp=float(row_sum.sum()) / elements if elements else 0.0,
        max_channel_ulp=float(channel.max()) if channel.numel() else 0.0,
        nan_mismatch=float(mismatch.float().mean()) if mismatch.numel() else 0.0,
        rows=int(compared.any(-1).sum()),
    )


def match(candidate: torch.Tensor, prediction: Prediction) -> Match:
    return match_prepared(Prepared.of(candidate), Prepared.of_prediction(prediction))


@dataclass(frozen=True)
class Ranked:
    hypothesis: str
    title: str
    why: str  # how a real port gets there
    variant: str
    how: str
    match: Match
    distinct: bool  # the mistake changes the output on this workload at all

    def to_json(self) -> dict[str, object]:
        return {
            "hypothesis": self.hypothesis,
            "title": self.title,
            "why": self.why,
            "variant": self.variant,
            "how": self.how,
            "distinct": self.distinct,
            **self.match.to_json(),
        }


def rank(entries: Sequence[Ranked]) -> list[Ranked]:
    """Best first: hypotheses that change the output here, by score; invisible ones last."""
    return sorted(entries, key=lambda e: (not e.distinct, e.match.score, e.match.mean_row_ulp))


def verdict(
    ranking: Sequence[Ranked], reference: Match, failed_bound: Mapping[str, float] | None = None
) -> str:
    """`failed_bound`: the limits of the bound the candidate failed (a run's failing pair), or None."""
    if failed_bound is None and reference.within_noise():
        return MATCHES_REFERENCE
    best = ranking[0] if ranking and ranking[0].distinct else None
    if best is None or not best.match.within(failed_bound):
        return UNEXPLAINED
    # A failed pair's bound is sharper than the score: the hypothesis reproduces the output within it
    # while the correct output does not (a small mistake on a long prefix is not 10x above bf16 noise).
    sharper = measures(failed_bound) and not reference.within_limits(failed_bound)
    return EXPLAINED if best.match.score * FAR_BETTER <= reference.score or sharper else UNEXPLAINED

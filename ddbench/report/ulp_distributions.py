"""Row-scaled ULP errors as distributions to plot (pure): per pair, across cases or across elements.

The results file keeps summary figures per case (max and mean row-scaled ULPs), so without the outputs the
distribution is over cases. With the saved outputs, every finite element's row-scaled error goes into a
fixed-bin histogram, accumulated case by case so a large suite never holds all its errors at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ddbench.metrics.ulp import row_scaled_ulps

FIGURES = ("max_row_ulp", "mean_row_ulp")


def pair_label(pair: Mapping[str, Any]) -> str:
    return f"{pair['candidate']} vs {pair['against']}"


def judged_pairs(cases: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(case, pair) for every pair that has figures (it ran, both sides produced an output)."""
    return [(c, p) for c in cases for p in c["pairs"] if p.get("figures")]


def figure_distributions(cases: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """pair -> figure name -> one value per case."""
    out: dict[str, dict[str, list[float]]] = {}
    for _, pair in judged_pairs(cases):
        values = out.setdefault(pair_label(pair), {name: [] for name in FIGURES})
        for name in FIGURES:
            values[name].append(float(pair["figures"][name]))
    return out


@dataclass
class Histogram:
    edges: np.ndarray
    counts: np.ndarray
    cases: int = 0

    @classmethod
    def up_to(cls, top: float, bins: int) -> Histogram:
        top = top if np.isfinite(top) and top > 0 else 1.0
        return cls(np.linspace(0.0, top * (1 + 1e-9), bins + 1), np.zeros(bins, dtype=np.int64))

    def add(self, candidate: torch.Tensor, against: torch.Tensor) -> None:
        """Count the finite elements' row-scaled errors of one case (the largest go to the last bin)."""
        finite = candidate.isfinite() & against.isfinite()
        errors = row_scaled_ulps(candidate, against)[finite].numpy()
        clipped = np.clip(errors, self.edges[0], self.edges[-1])
        self.counts += np.histogram(clipped, bins=self.edges)[0]
        self.cases += 1


def empty_histograms(cases: Sequence[Mapping[str, Any]], bins: int = 80) -> dict[str, Histogram]:
    """One histogram per pair, spanning 0 to the largest max_row_ulp any case reported for it."""
    tops: dict[str, float] = {}
    for _, pair in judged_pairs(cases):
        label = pair_label(pair)
        tops[label] = max(tops.get(label, 0.0), float(pair["figures"]["max_row_ulp"]))
    return {label: Histogram.up_to(top, bins) for label, top in tops.items()}

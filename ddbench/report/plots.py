"""PNG plots of a results document: latency against prefix length, and row-scaled ULP histograms.

matplotlib's object API (Figure, no pyplot): no global state and no GUI backend, so it runs headless in CI.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ddbench.atomic import write_atomic
from ddbench.report.latency_series import Group
from ddbench.report.ulp_distributions import FIGURES, Histogram

_FLOOR_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
_DPI = 110
_FIGURE_TITLES = {
    "max_row_ulp": "max row-scaled ULP per case",
    "mean_row_ulp": "mean row-scaled ULP per case",
}


def _colors(names: Sequence[str]) -> dict[str, str]:
    """A fixed color per backend across every facet, so one legend reads for all."""
    palette = [f"C{i}" for i in range(10)]
    return {name: palette[i % len(palette)] for i, name in enumerate(sorted(names))}


def _scales(ax, groups_x: Sequence[float], ys: Sequence[float]) -> None:
    positive = [x for x in groups_x if x > 0]
    if positive and max(positive) > 256 and max(positive) > 20 * min(positive):
        ax.set_xscale("symlog", linthresh=max(1.0, min(positive)))
    y = [v for v in ys if v > 0]
    if y and max(y) > 20 * min(y):
        ax.set_yscale("log")


def plot_latency(
    groups: Sequence[Group], title: str, path: Path, note: str = "", floor_label: str = "bandwidth floor"
) -> Path:
    """One facet per group of cases (same model, layout, batch, tree), one line per backend, and the
    bandwidth floor as a dashed line when the groups carry one."""
    columns = min(3, len(groups))
    rows = math.ceil(len(groups) / columns)
    fig = Figure(figsize=(5.6 * columns, 4.2 * rows + 0.9), layout="constrained")
    colors = _colors(sorted({name for g in groups for name in g.series}))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, group in zip(axes.flat, groups, strict=False):
        ys: list[float] = []
        for name, points in sorted(group.series.items()):
            x = [p.prefix for p in points]
            y = [p.median_us for p in points]
            spread = [[p.median_us - p.q1_us for p in points], [p.q3_us - p.median_us for p in points]]
            ax.errorbar(
                x, y, yerr=spread, marker="o", markersize=4, capsize=3, color=colors[name], label=name
            )
            ys += y
        if group.floor:
            fx, fy = zip(*group.floor, strict=True)
            ax.plot(fx, fy, label=floor_label, **_FLOOR_STYLE)
            ys += fy
        _scales(ax, sorted(group.prefixes), ys)
        ax.set_title(group.label, fontsize=10)
        ax.set_xlabel("prefix length (tokens; ragged batch: mean)")
        ax.set_ylabel("median latency (µs), bars: IQR")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    handles, labels = {}, []
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    fig.legend([handles[k] for k in labels], labels, loc="outside lower center", ncols=min(6, len(labels)))
    fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=11)
    return _save(fig, path)


def plot_figure_ulps(distributions: Mapping[str, Mapping[str, Sequence[float]]], path: Path) -> Path:
    """Per pair, how the cases' max and mean row-scaled ULP errors are spread (one value per case)."""
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    axes = fig.subplots(1, len(FIGURES), squeeze=False)[0]
    colors = _colors(list(distributions))
    for ax, figure in zip(axes, FIGURES, strict=True):
        top = max((max(v[figure], default=0.0) for v in distributions.values()), default=0.0)
        edges = [top * i / 40 if top > 0 else i / 40 for i in range(41)]
        for label, values in sorted(distributions.items()):
            ax.hist(
                values[figure], bins=edges, histtype="step", linewidth=1.5, color=colors[label], label=label
            )
        ax.set_title(_FIGURE_TITLES[figure], fontsize=10)
        ax.set_xlabel("bf16 ULPs of the row's largest |reference|")
        ax.set_ylabel("cases")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    cases = max((len(v[FIGURES[0]]) for v in distributions.values()), default=0)
    fig.suptitle(f"parity error by pair across {cases} cases (from the results' figures)", fontsize=11)
    return _save(fig, path)


def plot_element_ulps(histograms: Mapping[str, Histogram], path: Path) -> Path:
    """Per pair, every output element's row-scaled error (from saved outputs), log counts."""
    columns = min(3, len(histograms))
    rows = math.ceil(len(histograms) / columns)
    fig = Figure(figsize=(5.2 * columns, 3.8 * rows + 0.5), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    colors = _colors(list(histograms))
    for ax, (label, h) in zip(axes.flat, sorted(histograms.items()), strict=False):
        ax.stairs(h.counts, h.edges, fill=True, alpha=0.6, color=colors[label])
        ax.set_yscale("log")
        ax.set_title(f"{label} ({h.cases} cases, {int(h.counts.sum()):,} elements)", fontsize=10)
        ax.set_xlabel("row-scaled error (bf16 ULPs)")
        ax.set_ylabel("elements")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(histograms) :]:
        ax.set_visible(False)
    fig.suptitle("element-wise row-scaled error by pair (from the saved outputs)", fontsize=11)
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI)
    write_atomic(path, buffer.getvalue())
    return path

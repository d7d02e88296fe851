"""Which plots a results document supports, drawn into a folder: what `ddbench report` writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbench.report.bandwidth import known_bandwidth
from ddbench.report.latency_series import latency_groups
from ddbench.report.plots import plot_element_ulps, plot_figure_ulps, plot_latency
from ddbench.report.saved_outputs import element_histograms
from ddbench.report.ulp_distributions import figure_distributions

LATENCY_PNG = "latency_vs_prefix.png"
ULP_CASES_PNG = "ulp_per_case.png"
ULP_ELEMENTS_PNG = "ulp_elements.png"


@dataclass
class PlotReport:
    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # plots not drawn, and why


def bandwidth_floor(device: Mapping[str, Any], bandwidth_gbs: float | None) -> tuple[float | None, str]:
    """(GB/s or None, how the title states the floor)."""
    name = f"{device.get('name', '?')} ({device.get('kind', '?')})"
    if bandwidth_gbs:
        return bandwidth_gbs, f"{name}; floor at {bandwidth_gbs / 1000:g} TB/s (--bandwidth-gbs)"
    known = known_bandwidth(device)
    if known is None:
        return None, f"{name}: no known bandwidth floor (give --bandwidth-gbs to draw one)"
    model, gbs = known
    return gbs, f"{name}; floor: {model} at {gbs / 1000:g} TB/s"


def write_plots(
    document: Mapping[str, Any],
    out_dir: Path,
    bandwidth_gbs: float | None = None,
    outputs_dir: Path | None = None,
) -> PlotReport:
    report = PlotReport()
    cases = document.get("cases", [])
    gbs, device_text = bandwidth_floor(document.get("environment", {}).get("device", {}), bandwidth_gbs)
    groups, left_out = latency_groups(cases, gbs)
    if groups:
        note = (
            f"{len(groups)} of {len(groups) + left_out} case groups (most prefix lengths)" if left_out else ""
        )
        title = f"verify latency vs prefix length — {device_text}"
        floor = f"memory-bandwidth floor ({gbs / 1000:g} TB/s)" if gbs else ""
        report.written.append(plot_latency(groups, title, out_dir / LATENCY_PNG, note, floor))
    else:
        report.notes.append("no timed case (run with --timing): no latency plot")
    distributions = figure_distributions(cases)
    if not distributions:
        report.notes.append("no judged pair with figures: no ULP histogram")
        return report
    report.written.append(plot_figure_ulps(distributions, out_dir / ULP_CASES_PNG))
    if outputs_dir is not None:
        histograms = element_histograms(cases, outputs_dir)
        if histograms:
            report.written.append(plot_element_ulps(histograms, out_dir / ULP_ELEMENTS_PNG))
        else:
            report.notes.append(
                f"no saved outputs of judged pairs in {outputs_dir}: no element-wise histogram"
            )
    return report

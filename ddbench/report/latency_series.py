"""Latency against prefix length, as series to plot (pure): cases grouped by everything but the prefix.

A group shares model, layout (heads per rank), batch size, tree and page size, so within it latency moves
with the prefix alone; one series per backend. A ragged batch sits at its mean prefix length.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddbench.report.bandwidth import floor_us
from ddbench.trees import tree_label


@dataclass(frozen=True)
class Point:
    prefix: float
    median_us: float
    q1_us: float
    q3_us: float
    case_id: str


@dataclass
class Group:
    label: str
    series: dict[str, list[Point]] = field(default_factory=dict)  # backend -> points, by prefix
    floor: list[tuple[float, float]] = field(default_factory=list)  # (prefix, floor us)

    @property
    def prefixes(self) -> set[float]:
        return {p.prefix for points in self.series.values() for p in points}


def group_label(case: Mapping[str, Any]) -> str:
    layout = case["layout"]
    tp = f"tp{layout['tp']}" + (f"dp{layout['dp_attention']}" if layout["dp_attention"] > 1 else "")
    page = f" ps{case['page_size']}" if case["page_size"] != 1 else ""
    return (
        f"{case['model']['name']} {tp} h{case['heads_per_rank']} bs{case['batch_size']} "
        f"{tree_label(case['tree'])}{page}"
    )


def latency_groups(
    cases: Sequence[Mapping[str, Any]], bandwidth_gbs: float | None, max_groups: int = 6
) -> tuple[list[Group], int]:
    """The groups with the most distinct prefix lengths (at most `max_groups`), and how many were left out."""
    groups: dict[str, Group] = {}
    for c in cases:
        latency = c.get("latency")
        if not latency or not latency.get("backends"):
            continue
        case = c["case"]
        group = groups.setdefault(group_label(case), Group(group_label(case)))
        prefix = statistics.fmean(case["prefix_lens"])
        for name, m in latency["backends"].items():
            point = Point(prefix, m["median_us"], m["q1_us"], m["q3_us"], c["id"])
            group.series.setdefault(name, []).append(point)
        if bandwidth_gbs:
            group.floor.append((prefix, floor_us(case, bandwidth_gbs)))
    for group in groups.values():
        for points in group.series.values():
            points.sort(key=lambda p: p.prefix)
        group.floor.sort()
    ranked = sorted(
        groups.values(),
        key=lambda g: (-len(g.prefixes), -sum(map(len, g.series.values())), g.label),
    )
    return ranked[:max_groups], max(0, len(ranked) - max_groups)

"""A PNG of modeled time against prefix length per case shape, with the floor and the Triton model.

matplotlib's object API (no pyplot, no GUI backend); returns the PNG's bytes, the caller writes them.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence

from matplotlib.figure import Figure

from ddbench.model.profile import CaseProfile


def _shape_label(p: CaseProfile) -> str:
    return f"bs{p.shape.batch_size} q{p.shape.q_len} heads{p.shape.heads}"


def profile_png(profiles: Sequence[CaseProfile], title: str) -> bytes:
    groups: dict[str, list[CaseProfile]] = defaultdict(list)
    for p in profiles:
        groups[_shape_label(p)].append(p)
    columns = min(3, max(1, len(groups)))
    rows = -(-len(groups) // columns) or 1
    fig = Figure(figsize=(5.6 * columns, 4.2 * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, (label, members) in zip(axes.flat, sorted(groups.items()), strict=False):
        members = sorted(members, key=lambda p: sum(p.shape.prefix_lens) / p.shape.batch_size)
        x = [sum(p.shape.prefix_lens) / p.shape.batch_size for p in members]
        ax.plot(x, [p.launch.modeled_us for p in members], marker="o", label="cuda (modeled)")
        ax.plot(x, [p.triton_us for p in members], marker="s", label="triton (modeled)")
        ax.plot(x, [p.floor.us for p in members], color="black", linestyle="--", marker="x", label="floor")
        if len(set(x)) > 1 and max(x) > 256:
            ax.set_xscale("symlog", linthresh=max(1.0, min(v for v in x if v > 0) if any(x) else 1.0))
        ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("prefix length (tokens; ragged batch: mean)")
        ax.set_ylabel("modeled µs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle(title + "\nmodeled, not measured", fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()

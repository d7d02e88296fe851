"""Launches beside the plan's choice: what a sweep times on a GPU (ddbench/device/plan_sweep.py) or models on
the CPU (ddbench/runner/model_plan_sweep.py), so that a plan (ddbench/kernel/plan.py) that loses to a
neighbour shows."""

from __future__ import annotations

from collections.abc import Iterator

from ddbench.kernel.plan import MAX_COMBINE_ROWS, PlanOptions

CTA_FACTORS = (1, 2, 4, 8, 16, 32)  # CTAs per row tile
MAX_WAVES = 4
CLUSTER = 8


def plan_variants(
    row_tiles: int,
    sms: int,
    *,
    row_groups: int | None = None,
    max_clusters: int | None = None,
    combine_rows: int | None = None,
) -> Iterator[tuple[str, PlanOptions]]:
    """Each variant's name and what it forces of the plan (its GPU fields left unset): the plan itself, its
    combine's CTAs of half and twice the rows, whole row tiles, balanced ranges over the row tiles'
    multiples and over one and two waves (up to MAX_WAVES), 32- and 48-row CTAs, and every row tile in
    clusters of 8 in one wave (the final merge). `row_tiles` are the plan's, at its width `row_groups`, which
    the ranges and clusters then keep (a whole plan's width may not be the one a split would take).
    `max_clusters`: no more clusters than that (what the GPU runs at once; the model runs every cluster of a
    launch at once, a GPU runs the rest later). `combine_rows`: the plan's, where it combines."""
    width = PlanOptions(row_groups=row_groups)
    yield "plan", PlanOptions()
    if combine_rows is not None:
        for rows in sorted(
            {max(1, combine_rows // 2), min(MAX_COMBINE_ROWS, 2 * combine_rows)} - {combine_rows}
        ):
            yield f"combine_rows={rows}", PlanOptions(combine_rows=rows)
    yield "whole", PlanOptions(whole_row_tiles=True)
    for ctas in sorted({row_tiles * f for f in CTA_FACTORS} | {sms, 2 * sms}):
        if row_tiles < ctas <= MAX_WAVES * sms:
            yield f"ctas={ctas}", width.but(ctas=ctas)
    yield "rows=32", PlanOptions(row_groups=2)
    yield "rows=48", PlanOptions(row_groups=3)
    per_row_tile = sms // (CLUSTER * row_tiles)
    if max_clusters is not None:
        per_row_tile = min(per_row_tile, max_clusters // row_tiles)
    per_wave = per_row_tile * CLUSTER * row_tiles
    if per_wave:
        yield f"ctas={per_wave},cluster={CLUSTER}", width.but(ctas=per_wave, cluster=CLUSTER)

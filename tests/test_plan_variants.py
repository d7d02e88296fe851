"""The launches a plan sweep tries beside the plan's choice (on a GPU or in the model)."""

from __future__ import annotations

from ddbench.kernel.plan_variants import MAX_WAVES, plan_variants


def _forced(variants):
    return {name: options.forced_choices() for name, options in variants}


def test_the_variants_are_the_plan_whole_tiles_cta_counts_both_widths_and_clusters():
    named = _forced(plan_variants(row_tiles=2, sms=132))
    assert list(named)[:2] == ["plan", "whole"]
    assert named["plan"] == {} and named["whole"] == {"whole_row_tiles": True}
    counts = sorted(o["ctas"] for n, o in named.items() if n.startswith("ctas=") and "cluster" not in o)
    assert counts == [4, 8, 16, 32, 64, 132, 264]  # the row tiles' multiples, one and two waves
    assert named["rows=32"] == {"row_groups": 2} and named["rows=48"] == {"row_groups": 3}
    assert named["ctas=128,cluster=8"] == {"ctas": 128, "cluster": 8}  # 8 a row tile, in one wave


def test_no_variant_takes_more_than_the_waves_allowed_or_clusters_past_a_wave():
    named = _forced(plan_variants(row_tiles=40, sms=132))
    assert all(o["ctas"] <= MAX_WAVES * 132 for o in named.values() if "ctas" in o)
    assert not any("cluster" in o for o in named.values())  # 8 x 40 CTAs > a wave
    assert "ctas=1280" not in named and "ctas=320" in named


def test_the_clusters_variant_keeps_to_what_the_gpu_runs_at_once():
    assert _forced(plan_variants(row_tiles=16, sms=132))["ctas=128,cluster=8"] == {"ctas": 128, "cluster": 8}
    assert not any("cluster" in n for n in _forced(plan_variants(row_tiles=16, sms=132, max_clusters=15)))
    assert "ctas=64,cluster=8" in _forced(
        plan_variants(row_tiles=4, sms=132, max_clusters=11)
    )  # 2 a row tile


def test_ranges_and_clusters_keep_the_plans_width():
    named = _forced(plan_variants(row_tiles=96, sms=132, row_groups=3))
    assert named["ctas=132"] == {"ctas": 132, "row_groups": 3}
    assert named["whole"] == {"whole_row_tiles": True} and named["rows=32"] == {"row_groups": 2}


def test_a_combining_plan_is_also_tried_with_half_and_twice_its_combine_rows():
    named = _forced(plan_variants(row_tiles=11, sms=132, combine_rows=4))
    assert named["combine_rows=2"] == {"combine_rows": 2} and named["combine_rows=8"] == {"combine_rows": 8}
    assert list(named)[:3] == ["plan", "combine_rows=2", "combine_rows=8"]
    assert [n for n in _forced(plan_variants(row_tiles=11, sms=132, combine_rows=1)) if "combine" in n] == [
        "combine_rows=2"
    ]
    assert [n for n in _forced(plan_variants(row_tiles=11, sms=132, combine_rows=64)) if "combine" in n] == [
        "combine_rows=32"
    ]
    assert not any("combine" in n for n in _forced(plan_variants(row_tiles=11, sms=132)))  # no combine

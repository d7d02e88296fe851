"""Parity figures on known perturbations, and verdicts: limits pass or fail; NaN and unwritten output
always fail."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ddbench.metrics import FAIL, PASS, judge, parity_figures
from ddbench.metrics.figures import QUANTILE
from ddbench.poison import poison_
from ddbench.suite.model import ParityBound

SHAPE = (4, 8, 512)  # (tokens, heads, latent) like a small verify output


def reference_output(seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Attention-output-like values: per-channel scale, magnitudes well inside (0.01, 3)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(0.3 * torch.randn(SHAPE[-1], generator=g, dtype=torch.float64))
    out = (0.4 * torch.randn(SHAPE, generator=g, dtype=torch.float64) * scale).clamp(-2.5, 2.5)
    return out.to(dtype)


def shift_bits(x: torch.Tensor, index: tuple[int, ...], k: int) -> torch.Tensor:
    """Move one positive bf16 element k lattice points up (same binade for the values used here)."""
    out = x.clone()
    bits = out.view(torch.int16)
    bits[index] += k
    return out


def bound(**limits: float) -> ParityBound:
    return ParityBound("candidate", "truth", tuple(limits.items()))


# ---------------------------------------------------------------- figures


def test_identical_outputs_have_zero_figures():
    ref = reference_output(1)
    f = parity_figures(ref.clone(), ref)
    assert f.mode == "lattice"
    assert f.elements == ref.numel()
    assert (f.max_ulp, f.mean_ulp, f.p999_ulp, f.max_row_ulp, f.max_abs, f.rel_l2) == (0, 0, 0, 0, 0, 0)
    assert (f.nan, f.inf, f.unwritten, f.against_nonfinite) == (0, 0, 0, 0)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_one_element_off_by_k_ulps(k):
    ref = reference_output(2)
    where = (1, 2, 3)
    ref[where[:2]] = ref[where[:2]].clamp(-2.0, 2.0)
    ref[where] = 3.0  # the row's largest magnitude: spacing 2^-6 there, no binade crossing for k < 64
    cand = shift_bits(ref, where, k)
    f = parity_figures(cand, ref)
    assert f.mode == "lattice"
    assert f.max_ulp == k
    assert f.mean_ulp == pytest.approx(k / ref.numel())
    assert f.max_row_ulp == k  # the element is its row's max, so both scales agree
    assert f.max_abs == k * 2.0**-6
    assert f.mean_abs == pytest.approx(k * 2.0**-6 / ref.numel())
    assert f.worst == where
    assert f.p999_ulp == 0.0  # one element in 16384 is below the 99.9th percentile


def test_p999_sees_a_spread_error():
    ref = reference_output(3).abs() + 0.5  # positive, so adding to the bits moves away from zero
    cand = ref.clone()
    flat = cand.view(-1).view(torch.int16)
    n_off = int(ref.numel() * (1 - QUANTILE)) + 8  # more than the top 0.1 %
    flat[torch.randperm(ref.numel(), generator=torch.Generator().manual_seed(0))[:n_off]] += 4
    f = parity_figures(cand, ref)
    assert f.p999_ulp == 4.0
    assert f.max_ulp == 4.0


def test_row_scaled_figure_is_not_fooled_by_near_zero_elements():
    ref = reference_output(4)
    ref[0, 0, :] = ref[0, 0, :].clamp(-1.0, 1.0)
    ref[0, 0, 0] = 2.0  # row max: spacing 2^-6
    ref[0, 0, 1] = 2.0**-12  # tiny element
    cand = ref.clone()
    cand[0, 0, 1] = 2.0**-12 + 2.0**-7  # half a row ULP, thousands of element ULPs
    f = parity_figures(cand, ref)
    assert f.max_ulp == 5 * 128 + 4  # five binades from 2^-12 to 2^-7, then 4 steps of 2^-14
    assert f.max_row_ulp == pytest.approx(0.5)
    assert f.worst == (0, 0, 1)


def test_against_a_float_reference():
    ref = reference_output(5, torch.float64)
    cand = ref.to(torch.bfloat16)
    f = parity_figures(cand, ref)
    assert f.mode == "vs-float"
    assert 0.0 < f.max_ulp <= 0.5  # round-to-nearest is within half a ULP of the float value
    assert 0.0 < f.max_row_ulp <= 0.5
    assert f.max_abs > 0


def test_poisoned_elements_count_as_unwritten():
    ref = reference_output(6)
    cand = ref.clone()
    poison_(cand[2, 5, 100:107])
    f = parity_figures(cand, ref)
    assert f.unwritten == 7
    assert f.nan == 7  # the poison is a NaN
    assert f.max_ulp == 0.0  # figures over the written elements only
    verdict = judge(bound(max_row_ulp=1e9), f, "candidate")
    assert verdict.status == FAIL
    assert verdict.reasons == ("7 output elements never written",)


def test_nan_and_inf_are_counted_apart_from_the_poison():
    ref = reference_output(7)
    cand = ref.clone()
    cand[0, 1, 2] = float("nan")  # an ordinary NaN (0x7FC0), not the poison pattern
    cand[3, 4, 5] = float("nan")
    cand[1, 1, 1] = float("-inf")
    f = parity_figures(cand, ref)
    assert (f.nan, f.inf, f.unwritten) == (2, 1, 0)
    verdict = judge(bound(max_row_ulp=1e9, rel_l2=1e9), f, "candidate")
    assert verdict.status == FAIL
    assert verdict.reasons == ("3 NaN/Inf in candidate output",)


def test_nonfinite_reference_is_counted_and_fails():
    ref = reference_output(8)
    cand = ref.clone()
    ref[2, 2, 2] = float("inf")
    f = parity_figures(cand, ref)
    assert f.against_nonfinite == 1
    assert f.nan == f.inf == 0
    verdict = judge(bound(), f, "candidate")
    assert verdict.reasons == ("1 NaN/Inf in truth output",)


@pytest.mark.parametrize("factor", [1.01, 0.5, 1.25])
def test_rel_l2_of_a_scaled_tensor(factor):
    ref = reference_output(9, torch.float64)
    f = parity_figures(ref * factor, ref)
    assert f.rel_l2 == pytest.approx(abs(factor - 1), rel=1e-12)
    assert f.max_abs == pytest.approx(abs(factor - 1) * float(ref.abs().max()), rel=1e-12)


def test_a_uniform_gain_of_one_bf16_step_hides_under_row_ulps_but_not_under_the_gain_figure():
    """bf16(truth x (1 + 2^-8)) against the float truth: inside max_row_ulp 1.5 and mean 0.2 (the shipped
    cuda-emu bound), 1.0 in gain units; the controls (the truth rounded to bf16) stay near 0."""
    truth = reference_output(21, torch.float64)
    gained = parity_figures((truth * (1 + 2**-8)).to(torch.bfloat16), truth)
    assert gained.gain == pytest.approx(1.0, abs=0.1)
    limits = bound(max_row_ulp=1.5, mean_row_ulp=0.2, abs_gain=0.25)
    verdict = judge(limits, gained, "candidate")
    assert verdict.status == FAIL and [r.split()[0] for r in verdict.reasons] == ["abs_gain"]
    shrunk = parity_figures((truth * (1 - 2**-8)).to(torch.bfloat16), truth)
    assert shrunk.gain == pytest.approx(-1.0, abs=0.1) and shrunk.abs_gain == -shrunk.gain
    control = parity_figures(truth.to(torch.bfloat16), truth)
    assert abs(control.gain) <= 0.1 and judge(limits, control, "candidate").status == PASS
    assert parity_figures(truth, truth).gain == 0.0
    assert "gain" in control.to_json()


def test_shapes_must_match():
    ref = reference_output(10)
    with pytest.raises(ValueError, match="shapes differ"):
        parity_figures(ref[:3], ref)


def test_figures_serialise_to_json():
    ref = reference_output(11)
    f = parity_figures(shift_bits(ref.abs() + 0.5, (0, 0, 0), 2), ref.abs() + 0.5)
    js = f.to_json()
    assert js["worst"] == [0, 0, 0]
    assert js["max_ulp"] == 2.0


# ---------------------------------------------------------------- verdicts


def figures_with(**values):
    ref = reference_output(12)
    return dataclasses.replace(parity_figures(ref.clone(), ref), **values)


@pytest.mark.parametrize(
    ("value", "status"),
    [(2.9, PASS), (3.0, PASS), (3.01, FAIL), (float("nan"), FAIL)],
)
def test_judge_by_limit(value, status):
    verdict = judge(bound(max_row_ulp=3.0), figures_with(max_row_ulp=value), "candidate")
    assert verdict.status == status
    assert verdict.failed == (status == FAIL)
    if status == FAIL:
        assert len(verdict.reasons) == 1
        assert verdict.reasons[0].startswith("max_row_ulp ")
        assert verdict.reasons[0].endswith("> 3")


def test_judge_lists_every_broken_limit():
    f = figures_with(max_row_ulp=5.0, mean_row_ulp=0.1, rel_l2=0.5, max_abs=1.0)
    verdict = judge(bound(max_row_ulp=3.0, mean_row_ulp=0.4, rel_l2=0.006), f, "candidate")
    assert verdict.status == FAIL
    assert [r.split()[0] for r in verdict.reasons] == ["max_row_ulp", "rel_l2"]


def test_judge_ignores_figures_without_a_limit():
    verdict = judge(bound(rel_l2=0.01), figures_with(max_ulp=1e6, max_row_ulp=1e6), "candidate")
    assert verdict.status == PASS
    assert verdict.reasons == ()


@pytest.mark.parametrize(
    "broken",
    [{"unwritten": 1, "nan": 1}, {"nan": 1}, {"inf": 2}, {"against_nonfinite": 1}],
)
def test_judge_always_fails_on_nonfinite_or_unwritten(broken):
    verdict = judge(bound(), figures_with(**broken), "candidate")
    assert verdict.status == FAIL
    assert verdict.failed


# ---------------------------------------------------------------- channel-scaled figure


def _serving_like(seed: int) -> torch.Tensor:
    """MLA-like outputs: most channels ~0.04, eight outlier channels ~1 (the mla-serving input style)."""
    g = torch.Generator().manual_seed(seed)
    scale = 0.05 * torch.exp(0.3 * torch.randn(SHAPE[-1], generator=g, dtype=torch.float64))
    scale[torch.randperm(SHAPE[-1], generator=g)[:8]] *= 20
    return torch.randn(SHAPE, generator=g, dtype=torch.float64) * scale


def test_an_error_confined_to_small_channels_slips_the_row_scaled_limits_but_not_the_channel_figure():
    """15 % error on the elements under 2 % of their row's largest: row-scaled ULPs stay under 1.5 and
    their mean under 0.2 (the outlier channels set each row's scale); at each channel's own scale it is
    several ULPs. A correct bf16 rounding of the same output stays under one channel ULP."""
    truth = _serving_like(3)
    small = truth.abs() < 0.02 * truth.abs().amax(-1, keepdim=True)
    sign = torch.randint(0, 2, SHAPE, generator=torch.Generator().manual_seed(4)).double() * 2 - 1
    wrong = parity_figures(torch.where(small, truth * (1 + 0.15 * sign), truth).to(torch.bfloat16), truth)
    assert wrong.max_row_ulp < 1.5 and wrong.mean_row_ulp < 0.2 and abs(wrong.gain) < 0.25
    assert wrong.max_channel_ulp > 5
    rounded = parity_figures(truth.to(torch.bfloat16), truth)
    assert rounded.max_channel_ulp <= 0.5 + 1e-9  # round to nearest: half a ULP of the element, at most
    verdict = judge(bound(max_row_ulp=1.5, mean_row_ulp=0.2, max_channel_ulp=1.5), wrong, "candidate")
    assert verdict.status == FAIL and verdict.reasons[0].startswith("max_channel_ulp")

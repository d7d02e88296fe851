"""bf16 ULP arithmetic: lattice distances at the edges of the format, spacing, float-reference and
row-scaled ULPs.

Values are built from bit patterns so every edge (±0, subnormals, the normal/subnormal boundary, ±inf, NaN)
is exact, and the lattice distance is cross-checked against an independent ranking of every bf16 value.
"""

from __future__ import annotations

import math

import pytest
import torch

from ddbench.metrics.ulp import bf16_ordinal, bf16_spacing, lattice_ulps, row_scaled_ulps, ulps_vs_float

POS_ZERO, NEG_ZERO = 0x0000, 0x8000
MIN_SUB = 0x0001  # 2^-133
MAX_SUB = 0x007F  # 127 * 2^-133
MIN_NORMAL = 0x0080  # 2^-126
ONE, NEG_ONE = 0x3F80, 0xBF80
MAX_FINITE, POS_INF, NEG_INF = 0x7F7F, 0x7F80, 0xFF80
QNAN = 0x7FC0


def bf(*bits: int) -> torch.Tensor:
    """bf16 tensor from unsigned 16-bit patterns."""
    signed = [b - 0x10000 if b >= 0x8000 else b for b in bits]
    return torch.tensor(signed, dtype=torch.int16).view(torch.bfloat16)


def bits_of(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16).to(torch.int32) & 0xFFFF


def from_bits(bits: torch.Tensor) -> torch.Tensor:
    b = bits.to(torch.int32) & 0xFFFF
    return torch.where(b >= 0x8000, b - 0x10000, b).to(torch.int16).view(torch.bfloat16)


def dist(a: int, b: int) -> float:
    return float(lattice_ulps(bf(a), bf(b))[0])


def random_finite_bf16(n: int, seed: int) -> torch.Tensor:
    """Random bit patterns over the whole format, NaN and ±inf excluded."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 0x10000, (n,), generator=g)
    x = from_bits(bits)
    return x[x.isfinite()]


def next_up(x: torch.Tensor) -> torch.Tensor:
    """The next larger bf16 value, by bit manipulation (torch.nextafter has no bf16)."""
    b = bits_of(x)
    neg = b >= 0x8000
    up = torch.where(neg, b - 1, b + 1)
    up = torch.where(b == NEG_ZERO, torch.full_like(b, MIN_SUB), up)  # -0 -> smallest positive subnormal
    up = torch.where(b == 0x8000 + MIN_SUB, torch.full_like(b, NEG_ZERO), up)  # -2^-133 -> -0
    return from_bits(up)


# ---------------------------------------------------------------- lattice distance: edge cases


def test_plus_and_minus_zero_are_the_same_point():
    assert dist(POS_ZERO, NEG_ZERO) == 0.0
    assert int(bf16_ordinal(bf(NEG_ZERO))[0]) == int(bf16_ordinal(bf(POS_ZERO))[0]) == 0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (POS_ZERO, MIN_SUB),  # 0 -> smallest positive subnormal
        (NEG_ZERO, MIN_SUB),
        (MIN_SUB, MIN_SUB + 1),  # across the smallest subnormal
        (MAX_SUB, MIN_NORMAL),  # largest subnormal -> smallest normal
        (0x8000 | MAX_SUB, 0x8000 | MIN_NORMAL),  # same, negative side
        (ONE, ONE + 1),
        (ONE - 1, ONE),  # across a binade boundary
        (MAX_FINITE, POS_INF),
        (0x8000 | MAX_FINITE, NEG_INF),
    ],
)
def test_neighbours_are_one_ulp_apart(a, b):
    assert dist(a, b) == 1.0
    assert dist(b, a) == 1.0


def test_sign_crossing_counts_every_lattice_point():
    assert dist(MIN_SUB, 0x8000 | MIN_SUB) == 2.0  # -2^-133, 0, +2^-133
    assert dist(ONE, NEG_ONE) == 2.0 * 0x3F80  # 32512 points between -1 and 1
    assert dist(0x8000 | MAX_SUB, MIN_NORMAL) == 2.0 * 0x7F + 1


def test_nan_gives_nan_distance():
    d = lattice_ulps(bf(QNAN, ONE, QNAN, ONE), bf(ONE, QNAN, QNAN, ONE))
    assert d[:3].isnan().all()
    assert d[3] == 0.0


def test_ordinal_rejects_other_dtypes():
    with pytest.raises(TypeError, match="bfloat16"):
        bf16_ordinal(torch.ones(3))


def test_ordinal_is_monotone_over_every_bf16_value():
    every = from_bits(torch.arange(0x10000))
    every = every[~every.isnan()]
    ordered = every[every.float().argsort(stable=True)]
    ordinals = bf16_ordinal(ordered)
    steps = ordinals[1:] - ordinals[:-1]
    assert int(steps.min()) >= 0
    assert int(steps.max()) == 1
    assert int((steps == 0).sum()) == 1  # only -0 / +0 share a point


def test_lattice_distance_matches_an_independent_ranking():
    """Rank every non-NaN bf16 value by its float value (±0 merge); distance = rank difference."""
    every = from_bits(torch.arange(0x10000))
    lattice = torch.unique(every[~every.isnan()].double())  # sorted, ±0 merged
    a = random_finite_bf16(4000, seed=11)
    b = random_finite_bf16(4000, seed=12)
    n = min(a.numel(), b.numel())
    a, b = a[:n], b[:n]
    rank_a = torch.searchsorted(lattice, a.double())
    rank_b = torch.searchsorted(lattice, b.double())
    assert torch.equal(lattice[rank_a], a.double())  # every value is on the lattice
    expected = (rank_a - rank_b).abs().double()
    assert torch.equal(lattice_ulps(a, b), expected)


def test_random_values_and_their_bit_neighbours_are_one_apart():
    x = random_finite_bf16(5000, seed=3)
    x = x[bits_of(x) != MAX_FINITE]
    up = next_up(x)
    assert bool((up.double() > x.double()).all())  # the construction really steps up
    d = lattice_ulps(x, up)
    assert torch.equal(d, torch.ones_like(d))
    two_up = next_up(up[bits_of(up) != MAX_FINITE])
    assert torch.equal(
        lattice_ulps(x[bits_of(up) != MAX_FINITE], two_up),
        torch.full((two_up.numel(),), 2.0, dtype=torch.float64),
    )


# ---------------------------------------------------------------- spacing


@pytest.mark.parametrize(
    ("value", "spacing"),
    [
        (1.0, 2.0**-7),
        (0.75, 2.0**-8),
        (1.5, 2.0**-7),
        (2.0, 2.0**-6),
        (0.999, 2.0**-8),
        (-3.0, 2.0**-6),
        (1000.0, 2.0**-7 * 512),
        (2.0**-126, 2.0**-133),  # smallest normal
        (2.0**-127, 2.0**-133),  # subnormal
        (2.0**-133, 2.0**-133),  # smallest subnormal
        (1e-45, 2.0**-133),  # below the lattice
        pytest.param(0.0, 2.0**-133),
        pytest.param(-0.0, 2.0**-133),
    ],
)
def test_bf16_spacing(value, spacing):
    got = bf16_spacing(torch.tensor([value], dtype=torch.float64))
    assert got.dtype == torch.float64
    assert float(got[0]) == spacing


def test_spacing_is_the_gap_to_the_next_bf16_value():
    x = random_finite_bf16(5000, seed=5).abs()
    x = x[bits_of(x) < MAX_FINITE]
    gap = next_up(x).double() - x.double()
    assert torch.equal(bf16_spacing(x), gap)


# ---------------------------------------------------------------- against a float reference


def test_ulps_vs_float_known_values():
    r = torch.tensor([1.0, 1.0, 0.75, -2.0, 2.0**-130], dtype=torch.float64)
    a = torch.tensor([1.0 + 2**-7, 1.0, 0.75 - 3 * 2**-8, -2.0 - 2**-6, 2.0**-130 + 2**-132])
    got = ulps_vs_float(a.to(torch.bfloat16), r)
    assert got.tolist() == [1.0, 0.0, 3.0, 1.0, 2.0]


def test_ulps_vs_float_against_an_exact_zero_reference():
    """A candidate of 2^-133 (one subnormal step) where the reference is exactly 0 is 1 ULP, and 0.004 is
    a huge error, not one ULP."""
    r = torch.zeros(2, dtype=torch.float64)
    a = torch.tensor([2.0**-133, 2.0**-8], dtype=torch.float64)
    assert ulps_vs_float(a, r).tolist() == [1.0, 2.0**125]


def test_ulps_vs_float_fractional_reference():
    r = torch.tensor([1.0 + 2**-9, 3.0 + 2**-8], dtype=torch.float64)  # between lattice points
    a = torch.tensor([1.0, 3.0], dtype=torch.bfloat16)
    assert ulps_vs_float(a, r).tolist() == [0.25, 0.25]


def test_ulps_vs_float_matches_random_offsets():
    g = torch.Generator().manual_seed(9)
    r = (torch.randn(2000, generator=g, dtype=torch.float64) * 3).to(torch.bfloat16).double()
    r = r[r != 0]
    k = torch.randint(-20, 21, r.shape, generator=g).double()
    exponent = torch.floor(torch.log2(r.abs()))
    a = r + k * torch.pow(2.0, exponent - 7)
    # stay inside the binade of r so that a is exactly representable
    same_binade = torch.floor(torch.log2(a.abs())) == exponent
    a, r, k = a[same_binade], r[same_binade], k[same_binade]
    assert torch.equal(a.to(torch.bfloat16).double(), a)
    assert torch.equal(ulps_vs_float(a.to(torch.bfloat16), r), k.abs())


def test_row_scaled_ulps_use_the_rows_largest_magnitude():
    r = torch.tensor([[4.0, 0.001, -0.5], [-8.0, 1.0, 2.0**-20]], dtype=torch.float64)
    a = r.clone()
    a[0, 1] += 2.0**-5  # one ULP at 4.0 (spacing 2^-5), thousands at 0.001
    a[1, 2] += 3 * 2.0**-4  # row max |-8| has spacing 2^-4
    got = row_scaled_ulps(a, r)
    assert got[0].tolist() == [0.0, 1.0, 0.0]
    assert got[1].tolist() == [0.0, 0.0, 3.0]
    elementwise = ulps_vs_float(a, r)
    assert float(elementwise[0, 1]) > 1000


def test_row_scaled_ulps_ignore_nonfinite_reference_for_the_scale():
    r = torch.tensor([[float("nan"), 2.0, 1.0], [float("inf"), 0.5, 0.25]], dtype=torch.float64)
    a = r.clone()
    a[0, 2] += 2.0**-6  # row max 2.0 -> spacing 2^-6
    a[1, 2] += 2.0**-8  # row max 0.5 (inf ignored) -> spacing 2^-8
    got = row_scaled_ulps(a, r)
    assert float(got[0, 2]) == 1.0
    assert float(got[1, 2]) == 1.0
    assert math.isnan(float(got[0, 0]))


def test_row_scaled_ulps_on_a_zero_row_use_the_subnormal_spacing():
    r = torch.zeros(1, 4, dtype=torch.float64)
    a = r.clone()
    a[0, 0] = 2.0**-130
    assert float(row_scaled_ulps(a, r)[0, 0]) == 8.0

"""Parity figures of a candidate output against another (taken as truth)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ddbench.metrics.ulp import channel_scaled_ulps, lattice_ulps, row_scaled_ulps, ulps_vs_float
from ddbench.poison import poisoned_mask

QUANTILE = 0.999


GAIN_UNITS = 2.0**8  # the gain figure counts bf16 steps (2^-8 relative)


@dataclass(frozen=True)
class ParityFigures:
    mode: str  # "lattice" (two bf16 outputs) or "vs-float" (against a float reference)
    elements: int
    max_ulp: float
    mean_ulp: float
    p999_ulp: float
    max_row_ulp: float
    mean_row_ulp: float
    max_abs: float
    mean_abs: float
    rel_l2: float
    nan: int  # in the candidate
    inf: int
    unwritten: int  # still holding the poison pattern
    against_nonfinite: int
    worst: tuple[int, int, int] | None  # (token, head, column) of the worst row-scaled error
    # Least-squares scale of the candidate against the reference, <o, r> / <r, r> - 1, in units of 2^-8 (one
    # bf16 step): a uniform gain of one step sits under row-scaled ULP limits but shows here as 1.0.
    gain: float = 0.0
    # The error in ULPs of each channel's largest |reference| over the output (ulp.channel_scaled_ulps): an
    # error confined to the many small channels, invisible at the outlier channels' scale, shows here.
    max_channel_ulp: float = 0.0

    @property
    def abs_gain(self) -> float:
        return abs(self.gain)

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["worst"] = list(self.worst) if self.worst else None
        return out


def _upper_quantile(values: torch.Tensor, q: float) -> float:
    if values.numel() == 0:
        return 0.0
    k = max(1, min(values.numel(), round(q * values.numel())))
    return float(values.flatten().kthvalue(k).values)


def parity_figures(candidate: torch.Tensor, against: torch.Tensor) -> ParityFigures:
    if candidate.shape != against.shape:
        raise ValueError(f"output shapes differ: {tuple(candidate.shape)} vs {tuple(against.shape)}")
    cand, ref = candidate.detach().cpu(), against.detach().cpu()
    unwritten = int(poisoned_mask(cand).sum())
    finite = cand.isfinite() & ref.isfinite()
    both_bf16 = cand.dtype == torch.bfloat16 and ref.dtype == torch.bfloat16
    element = lattice_ulps(cand, ref) if both_bf16 else ulps_vs_float(cand, ref)
    row = row_scaled_ulps(cand, ref)
    ok_channel = channel_scaled_ulps(cand, ref)[finite]
    diff = (cand.double() - ref.double()).abs()
    ok_element, ok_row, ok_diff = element[finite], row[finite], diff[finite]
    ref_finite = ref.double()[finite]
    norm = float(ref_finite.norm())
    # <o, r> / <r, r> - 1 as <o - r, r> / <r, r>: exactly 0 for identical outputs
    excess = float(((cand.double()[finite] - ref_finite) * ref_finite).sum())
    worst = None
    if ok_row.numel():
        flat = row.masked_fill(~finite, -1.0).flatten().argmax()
        worst = tuple(int(i) for i in torch.unravel_index(flat, row.shape))
    return ParityFigures(
        mode="lattice" if both_bf16 else "vs-float",
        elements=cand.numel(),
        max_ulp=float(ok_element.max()) if ok_element.numel() else 0.0,
        mean_ulp=float(ok_element.mean()) if ok_element.numel() else 0.0,
        p999_ulp=_upper_quantile(ok_element, QUANTILE),
        max_row_ulp=float(ok_row.max()) if ok_row.numel() else 0.0,
        mean_row_ulp=float(ok_row.mean()) if ok_row.numel() else 0.0,
        max_abs=float(ok_diff.max()) if ok_diff.numel() else 0.0,
        mean_abs=float(ok_diff.mean()) if ok_diff.numel() else 0.0,
        rel_l2=float(ok_diff.norm()) / norm if norm > 0 else float(ok_diff.norm()),
        nan=int(cand.isnan().sum()),
        inf=int(cand.isinf().sum()),
        unwritten=unwritten,
        against_nonfinite=int((~ref.isfinite()).sum()),
        worst=worst,  # type: ignore[arg-type]
        gain=excess / norm**2 * GAIN_UNITS if norm > 0 else 0.0,
        max_channel_ulp=float(ok_channel.max()) if ok_channel.numel() else 0.0,
    )

"""Where the error is: by request, tree depth, head, and the part of the keys a row attends most.

When no hypothesis explains a failure, the map still localises it: a wrong tree mask leaves the root rows
(which see the prefix and themselves only) clean; a head-indexing bug shows in some heads only; a ragged-
batch bug in some requests; a wrong prefix gather in the rows that lean on the prefix. Pure tensor code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ddbench.explain.attention import Prediction, read_draft_mask, request_bounds
from ddbench.explain.rank import NOISE_REL_L2
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics.ulp import row_scaled_ulps

WRONG_REL_L2 = 0.1  # a group this far off is wrong, whatever the noise
CONCENTRATED_SHARE = 0.8  # this much of the squared error ...
CONCENTRATED_ROWS = 0.5  # ... on at most this share of the rows is "concentrated"
PARTS = (
    (0.0, 0.1, "prefix-dominated rows (<10% of attention on draft keys)"),
    (0.1, 0.5, "mixed rows (10-50% on draft keys)"),
    (0.5, 1.01, "tree-dominated rows (>=50% on draft keys)"),
)


@dataclass(frozen=True)
class Group:
    key: int
    label: str
    rows: int
    bad_rows: int  # NaN/Inf rows in the candidate (or the reference)
    rel_l2: float
    max_row_ulp: float
    error_share: float  # of the squared error on finite rows

    @property
    def clean(self) -> bool:
        return self.bad_rows == 0 and self.rel_l2 <= NOISE_REL_L2

    @property
    def wrong(self) -> bool:
        return self.bad_rows > 0 or self.rel_l2 > WRONG_REL_L2

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "label": self.label,
            "rows": self.rows,
            "bad_rows": self.bad_rows,
            "rel_l2": float(f"{self.rel_l2:.4g}"),
            "max_row_ulp": float(f"{self.max_row_ulp:.4g}"),
            "error_share": float(f"{self.error_share:.3g}"),
        }


@dataclass(frozen=True)
class ErrorMap:
    rows: int
    bad_rows: int
    zero_rows: int  # exactly 0 in the candidate where the correct row is not
    rel_l2: float
    axes: dict[str, tuple[Group, ...]]  # "request", "depth", "head", "part"
    findings: tuple[str, ...]  # one sentence each, most telling first

    def to_json(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "bad_rows": self.bad_rows,
            "zero_rows": self.zero_rows,
            "rel_l2": float(f"{self.rel_l2:.4g}"),
            **{f"by_{axis}": [g.to_json() for g in groups] for axis, groups in self.axes.items()},
            "findings": list(self.findings),
        }


def draft_depths(x: VerifyInputs) -> torch.Tensor:
    """(T,) depth of each draft token in its tree: ancestors in its correct mask row, minus itself."""
    depth = torch.zeros(x.q_extend.shape[0], dtype=torch.long)
    for r, (q0, q1, kv0, kv1, _) in enumerate(request_bounds(x)):
        prefix, q_len = kv1 - kv0, q1 - q0
        depth[q0:q1] = read_draft_mask(x, r, prefix + q_len, prefix).sum(-1).cpu() - 1
    return depth


def _span(keys: Sequence[int]) -> str:
    """1,2,3,5 -> '1-3,5'."""
    keys, parts, i = sorted(keys), [], 0
    while i < len(keys):
        j = i
        while j + 1 < len(keys) and keys[j + 1] == keys[j] + 1:
            j += 1
        parts.append(str(keys[i]) if i == j else f"{keys[i]}-{keys[j]}")
        i = j + 1
    return ",".join(parts)


def _groups(
    key: torch.Tensor,
    err2: torch.Tensor,
    ref2: torch.Tensor,
    ulp: torch.Tensor,
    bad: torch.Tensor,
    label: Callable[[int], str],
) -> tuple[Group, ...]:
    total = float(err2.sum()) or 1.0
    out = []
    for k in sorted(set(key.flatten().tolist())):
        sel = key == k
        e, r = float(err2[sel].sum()), float(ref2[sel].sum())
        rel = (e / r) ** 0.5 if r > 0 else (0.0 if e == 0 else 1.0)
        out.append(
            Group(
                k,
                label(k),
                int(sel.sum()),
                int(bad[sel].sum()),
                rel,
                float(ulp[sel].max()) if bool(sel.any()) else 0.0,
                e / total,
            )
        )
    return tuple(out)


def _column_finding(c: torch.Tensor, r: torch.Tensor) -> str | None:
    """NaN/Inf elements the correct output does not have, when they sit in some columns only (an output
    column never written, a bad store offset): the columns, how many rows and heads."""
    stray = ~c.isfinite() & r.isfinite()
    if not bool(stray.any()):
        return None
    columns = stray.flatten(0, 1).any(0)
    if bool(columns.all()):
        return None  # whole rows: the row finding says it
    hit = stray.any(-1)
    rows, heads = int(hit.sum()), int(hit.any(0).sum())
    cols = [int(i) for i in columns.nonzero().flatten()]
    every = " in every row" if rows == hit.numel() else f" in {rows} of {hit.numel()} rows"
    return (
        f"column{'s' if len(cols) > 1 else ''} {_span(cols)} of {c.shape[-1]} NaN/Inf{every} "
        f"({heads} of {hit.shape[1]} heads), the rest of those rows finite: never written?"
    )


def _findings(
    axes: dict[str, tuple[Group, ...]],
    rows: int,
    bad_rows: int,
    rel: float,
    zero_rows: int,
    columns: str | None,
) -> list[str]:
    out: list[str] = [columns] if columns else []
    if zero_rows:
        out.append(
            f"{zero_rows} of {rows} rows exactly 0 where the correct output is not "
            "(an empty-row or NaN guard in the kernel? a stray read it dropped?)"
        )
    names = {"request": "requests", "depth": "depths", "head": "heads", "part": "parts"}
    if bad_rows:
        where = [
            f"{names[a]} {_span([g.key for g in gs if g.bad_rows])}"
            if a != "part"
            else "; ".join(g.label for g in gs if g.bad_rows)
            for a, gs in axes.items()
            if any(g.bad_rows == 0 for g in gs) and len(gs) > 1
        ]
        what = "rows with NaN/Inf elements" if columns else "rows NaN/Inf"
        out.append(f"{bad_rows} of {rows} {what}" + (f", only in {'; '.join(where)}" if where else ""))
    for axis, groups in axes.items():
        if len(groups) < 2:
            continue
        top = max(groups, key=lambda g: g.error_share)
        if (
            top.error_share >= CONCENTRATED_SHARE
            and top.rows <= CONCENTRATED_ROWS * rows
            and rel > NOISE_REL_L2
        ):
            out.append(f"{top.error_share:.0%} of the error in {top.label} ({top.rows / rows:.0%} of rows)")
        clean = [g for g in groups if g.clean]
        wrong = [g for g in groups if g.wrong]
        if clean and wrong:
            if axis == "part":
                out.append(
                    "wrong: "
                    + "; ".join(g.label for g in wrong)
                    + "; clean: "
                    + "; ".join(g.label for g in clean)
                )
            else:
                out.append(
                    f"by {axis}: wrong at {names[axis]} {_span([g.key for g in wrong])}, "
                    f"clean at {_span([g.key for g in clean])}"
                )
    if not out and rel > NOISE_REL_L2:
        out.append("error spread over every request, depth and head")
    return out


def error_map(candidate: torch.Tensor, correct: Prediction, x: VerifyInputs) -> ErrorMap:
    c = candidate.detach().to("cpu", torch.float64)
    r = correct.output.detach().to("cpu", torch.float64)
    total, heads = c.shape[:2]
    bad = ~c.isfinite().all(-1) | ~r.isfinite().all(-1)
    finite = ~bad
    diff = torch.where(finite[..., None], c - r, torch.zeros_like(c))
    ref = torch.where(finite[..., None], r, torch.zeros_like(r))
    err2, ref2 = diff.square().sum(-1), ref.square().sum(-1)
    ulp = torch.where(finite, row_scaled_ulps(c, r).nan_to_num(0.0).amax(-1), torch.zeros_like(err2))

    bounds = request_bounds(x)
    request = torch.zeros(total, dtype=torch.long)
    for i, (q0, q1, *_) in enumerate(bounds):
        request[q0:q1] = i
    depth = draft_depths(x)
    mass = correct.tree_mass.detach().to("cpu", torch.float64).nan_to_num(1.0)
    part = torch.zeros(total, heads, dtype=torch.long)
    for k, (lo, _, _) in enumerate(PARTS):
        part[mass >= lo] = k

    def request_label(i: int) -> str:
        q0, q1, kv0, kv1, _ = bounds[i]
        return f"request {i} (prefix {kv1 - kv0}, q_len {q1 - q0})"

    per_row = (err2, ref2, ulp, bad)
    axes = {
        "request": _groups(request[:, None].expand(total, heads), *per_row, request_label),
        "depth": _groups(depth[:, None].expand(total, heads), *per_row, lambda d: f"depth {d}"),
        "head": _groups(torch.arange(heads)[None, :].expand(total, heads), *per_row, lambda h: f"head {h}"),
        "part": _groups(part, *per_row, lambda k: PARTS[k][2]),
    }
    s_ref = float(ref2.sum())
    rel = (float(err2.sum()) / s_ref) ** 0.5 if s_ref > 0 else 0.0
    rows, bad_rows = total * heads, int(bad.sum())
    zero_rows = int((finite & (c == 0).all(-1) & (r != 0).any(-1)).sum())
    findings = _findings(axes, rows, bad_rows, rel, zero_rows, _column_finding(c, r))
    return ErrorMap(rows, bad_rows, zero_rows, rel, axes, tuple(findings))

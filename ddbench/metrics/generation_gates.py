"""The three gates of an end-to-end generation case (pure).

1. teacher-forced: at every verify step (same trees, same pool state) the candidate's logits against the
   bound's `against` attention: absolute limits, and no worse than the `no_worse_than` backend plus a margin;
2. free-running: the tokens equal plain greedy decoding and the `against` backend's own speculative run,
   tie-aware: two runs may part only where both runs' top-2 logit margins are below tau (a near-tie that
   either correct kernel may break its own way), and the comparison stops there;
3. acceptance: the mean accept length reaches the case's floor (speculation that silently stopped
   accepting would otherwise pass every other gate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddbench.metrics.verdict import FAIL, PASS


@dataclass(frozen=True)
class GateCheck:
    gate: str  # teacher_forced, tokens_vs_greedy, tokens_vs_<backend>, accept_length
    status: str
    detail: str
    figures: dict[str, Any]
    short: str = ""  # the figure a one-line summary of a passing pair shows

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "status": self.status, "detail": self.detail, "figures": self.figures}


@dataclass(frozen=True)
class TokenAgreement:
    compared: int  # tokens equal up to each request's first divergence (or its end)
    total: int
    divergence: tuple[int, int] | None  # (request, token index) of the first divergence that decides
    margins: tuple[float, float] | None  # both runs' top-2 margins at that token
    tie: bool  # the divergence is a near-tie on both sides

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compared": self.compared, "total": self.total, "tie": self.tie}
        if self.divergence is not None:
            out["divergence"] = {"request": self.divergence[0], "token": self.divergence[1]}
            out["margins"] = [round(m, 6) for m in self.margins or ()]
        return out


def agreement(
    a: Sequence[Sequence[int]],
    a_margins: Sequence[Sequence[float]],
    b: Sequence[Sequence[int]],
    b_margins: Sequence[Sequence[float]],
    tau: float,
) -> TokenAgreement:
    """Request by request up to its first divergence; a divergence that is not a tie decides over ties."""
    compared, total = 0, 0
    tie_at: tuple[tuple[int, int], tuple[float, float]] | None = None
    for r, (ta, tb) in enumerate(zip(a, b, strict=True)):
        total += max(len(ta), len(tb))
        n = min(len(ta), len(tb))
        i = next((i for i in range(n) if ta[i] != tb[i]), n)
        compared += i
        if i == n and len(ta) == len(tb):
            continue
        if i == n:  # one run stopped early: a divergence no margin explains
            return TokenAgreement(compared, total, (r, i), (float("nan"), float("nan")), False)
        margins = (float(a_margins[r][i]), float(b_margins[r][i]))
        if max(margins) >= tau:
            return TokenAgreement(compared, total, (r, i), margins, False)
        tie_at = tie_at or ((r, i), margins)
    if tie_at is None:
        return TokenAgreement(compared, total, None, None, False)
    return TokenAgreement(compared, total, tie_at[0], tie_at[1], True)


def tokens_gate(name: str, against: str, found: TokenAgreement, tau: float) -> GateCheck:
    figures = found.to_json() | {"tau": tau}
    short = f"{name.removeprefix('tokens_vs_')} {found.compared}/{found.total}"
    if found.divergence is None:
        return GateCheck(
            name, PASS, f"{found.compared}/{found.total} tokens equal to {against}", figures, short
        )
    r, i = found.divergence
    where = f"request {r} token {i}"
    if found.tie:
        a, b = found.margins or (0.0, 0.0)
        return GateCheck(
            name,
            PASS,
            f"{found.compared}/{found.total} tokens equal to {against}; parted at {where} on a near-tie "
            f"(top-2 margins {a:.4g} and {b:.4g} < tau {tau:g}), compared no further",
            figures,
            short + " (tie)",
        )
    a, b = found.margins or (float("nan"), float("nan"))
    margins = (
        f" (top-2 margins {a:.4g} and {b:.4g}, tau {tau:g})" if a == a and b == b else " (one run ended)"
    )
    detail = f"differs from {against} at {where} after {found.compared} equal tokens{margins}"
    return GateCheck(name, FAIL, detail, figures)


def teacher_forced_gate(
    against: str,
    limits: dict[str, float],
    max_abs: float,
    mean_abs: float,
    flips: int,
    steps: int,
    peer: tuple[str, float] | None,
) -> GateCheck:
    """`limits`: max_logit_abs, mean_logit_abs, margin_logit_abs (the last over `peer`'s max_abs)."""
    figures: dict[str, Any] = {
        "steps": steps, "max_logit_abs": max_abs, "mean_logit_abs": mean_abs, "confident_flips": flips,
    }  # fmt: skip
    failed = []
    if steps == 0:
        return GateCheck("teacher_forced", FAIL, f"no verify step was compared with {against}", figures)
    for name, value in (("max_logit_abs", max_abs), ("mean_logit_abs", mean_abs)):
        limit = limits.get(name)
        if limit is not None and not value <= limit:
            failed.append(f"{name} {value:.4g} > {limit:g}")
    margin = limits.get("margin_logit_abs")
    if peer is not None and margin is not None:
        peer_name, peer_max = peer
        figures["peer"] = {"backend": peer_name, "max_logit_abs": peer_max}
        if not max_abs <= peer_max + margin:
            failed.append(f"max_logit_abs {max_abs:.4g} > {peer_name}'s {peer_max:.4g} + {margin:g}")
    if failed:
        return GateCheck("teacher_forced", FAIL, f"logits against {against}: " + "; ".join(failed), figures)
    note = "" if peer is not None or margin is None else "; no_worse_than not judged: its backend did not run"
    return GateCheck(
        "teacher_forced",
        PASS,
        f"logits within bounds of {against} over {steps} verify steps{note}",
        figures,
        f"logits max {max_abs:.3g}" + (f" ({peer[0]} {peer[1]:.3g})" if peer else ""),
    )


def accept_gate(mean: float, floor: float, request_steps: int) -> GateCheck:
    figures = {"mean_accept_length": round(mean, 4), "floor": floor, "request_steps": request_steps}
    if not mean >= floor:
        return GateCheck(
            "accept_length",
            FAIL,
            f"mean accept length {mean:.3g} below the drafter's floor {floor:g}",
            figures,
        )
    return GateCheck(
        "accept_length",
        PASS,
        f"mean accept length {mean:.3g} (floor {floor:g})",
        figures,
        f"accept {mean:.2f}",
    )

"""A modeled profile as tables and markdown: the counters' summary, the modeled figures, where the slowest
CTA's time goes, which source lines issue the most, and the plan beside its neighbours (pure).

Every time printed is modeled; the headers and the markdown say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ddbench.gpus import GpuSpec
from ddbench.model.calibration import Calibration
from ddbench.model.kernel_time import STAGES
from ddbench.model.profile import CaseProfile
from ddbench.model.warp_instructions import IssueCount
from ddbench.results.modeled_case import MODELED_NOTE
from ddbench.results.plan_sweep import PlanSweep


def _fmt_us(us: float) -> str:
    return f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def _fmt_issue(issue: IssueCount | None) -> str:
    return "-" if issue is None else f"{issue.likely / 1e6:.2f} {issue.method}"


def table_rows(profiles: Sequence[CaseProfile]) -> list[dict[str, str]]:
    """One row per case: the counters' summary, then the modeled figures (headers say modeled)."""
    rows = []
    for p in profiles:
        ks = p.launch.kernels
        wpi = [k.wavefronts_per_shared_instruction for k in ks if k.wavefronts_per_shared_instruction]
        rows.append(
            {
                "case": p.case_id,
                "unique DRAM MB": f"{sum(k.unique_bytes for k in ks) / 1e6:.2f}",
                "L2 MB": f"{sum(k.l2_bytes for k in ks) / 1e6:.2f}",
                "wavefronts/smem instr": f"{wpi[0]:.2f}" if wpi else "-",
                "CTAs (waves)": ", ".join(f"{k.ctas} ({k.waves})" for k in ks),
                "modeled µs per kernel": ", ".join(_fmt_us(k.modeled_us) for k in ks),
                "modeled µs": _fmt_us(p.launch.modeled_us),
                "floor µs": _fmt_us(p.floor.us),
                "modeled % of floor": f"{p.floor.percent_of(p.launch.modeled_us):.0f}",
                "limiter": p.launch.limiter,
                "modeled warp instr (M)": ", ".join(_fmt_issue(k.issue) for k in ks),
                "modeled Triton µs": _fmt_us(p.triton_us),
                "modeled cuda/triton": f"{p.cuda_over_triton:.2f}",
            }
        )
    return rows


def stage_rows(profiles: Sequence[CaseProfile]) -> list[dict[str, str]]:
    """One row per kernel of a case: where its slowest CTA's modeled time goes (STAGES), which is what a
    kernel change must shorten wherever that CTA sets the launch's time."""
    return [
        {
            "case": p.case_id,
            "kernel": k.name,
            "modeled slowest CTA µs": _fmt_us(k.slowest_cta_us),
            **{s: _fmt_us(k.slowest_cta_stages_us.get(s, 0.0)) for s in STAGES},
        }
        for p in profiles
        for k in p.launch.kernels
    ]


def _table(rows: list[dict[str, str]]) -> list[str]:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return lines + ["| " + " | ".join(r[c].replace("|", "\\|") for c in cols) + " |" for r in rows]


def instruction_rows(
    profiles: Sequence[CaseProfile], top: int, source: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """Per kernel of a case, the `top` source lines whose SASS issues the most warp instructions (the likely
    figure, over the launch), with their share of the kernel's and, from `source` ("file:line" -> text),
    the line itself: what a change must cut where the issue binds."""
    rows = []
    for p in profiles:
        for k in p.launch.kernels:
            if k.issue is None or not k.issue.by_line:
                continue
            total = sum(k.issue.by_line.values())
            for line, n in sorted(k.issue.by_line.items(), key=lambda kv: -kv[1])[:top]:
                rows.append(
                    {
                        "case": p.case_id,
                        "kernel": k.name,
                        "line": line or "(no line)",
                        "modeled warp instr (M)": f"{n / 1e6:.3f}",
                        "share %": f"{100 * n / total:.1f}",
                        "source": (source or {}).get(line, "")[:70],
                    }
                )
    return rows


def profile_markdown(profiles: Sequence[CaseProfile], gpu: GpuSpec, calibration: Calibration) -> str:
    rows = table_rows(profiles)
    head = [
        f"# Modeled profile on {gpu.name}",
        "",
        f"Every time below is {MODELED_NOTE}. Calibration: {calibration.label}; "
        f"model error: {calibration.error_band}. The Triton figures model SGLang's kernel from its grid "
        "and traffic (not emulated).",
        "",
    ]
    if not rows:
        return "\n".join([*head, "No case."]) + "\n"
    stages = [
        "",
        "Where each kernel's slowest CTA spends its modeled time (µs): before its first mma, its main loop, "
        "after it, its pipeline's waits beyond its compute, its cluster's merge, its final merge.",
        "",
    ]
    return "\n".join(head + _table(rows) + stages + _table(stage_rows(profiles))) + "\n"


def sweep_rows(sweeps: Sequence[PlanSweep]) -> list[dict[str, str]]:
    """One row per case: the plan's modeled time beside its fastest neighbour's, and what the plan refused."""
    rows = []
    for sweep in sweeps:
        fastest, figures = sweep.fastest, sweep.modeled_us
        rows.append(
            {
                "case": sweep.case,
                "plan": sweep.plan,
                "plan µs": f"{figures['plan']:.2f}" if "plan" in figures else "refused",
                "fastest": fastest or "-",
                "its µs": f"{figures[fastest]:.2f}" if fastest else "-",
                "saves": f"{100 * sweep.gain:.1f} %",
                "refused": ", ".join(sweep.refused) or "-",
            }
        )
    return rows

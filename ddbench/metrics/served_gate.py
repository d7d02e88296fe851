"""Whether the candidate really served a live server's verify calls (pure).

Two servers that produce the same text prove nothing about the kernel if the kernel never ran: the plugin
may not have armed, the candidate may have been unavailable, or a breach may have handed every later call
back to Triton. This gate reads the plugin's own counts, process by process, and passes only when the
candidate served and nothing fell back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddbench.metrics.generation_gates import GateCheck
from ddbench.metrics.verdict import FAIL, PASS


@dataclass(frozen=True)
class ServedCounts:
    """One serving process's last counters line (a TP rank)."""

    where: str  # "rank 3 (pid 4242)"
    served_candidate: int
    served_triton: int
    fallbacks: int
    breaches: int
    tripped: bool
    unavailable: str | None
    ineligible: dict[str, int]


def served_gate(candidate: str, processes: Sequence[ServedCounts], graphs: bool) -> GateCheck:
    """`graphs`: the server captured CUDA graphs, whose replays no hook sees (counts are captures then)."""
    figures = {
        "processes": len(processes),
        "served_candidate": sum(p.served_candidate for p in processes),
        "served_triton": sum(p.served_triton for p in processes),
        "fallbacks": sum(p.fallbacks for p in processes),
        "breaches": sum(p.breaches for p in processes),
        "ineligible": _merged(p.ineligible for p in processes),
        "counts_are": "eager calls and graph captures (replays are not seen)" if graphs else "every call",
    }
    problems = []
    if not processes:
        problems.append(
            "the plugin wrote no counters: it never armed or never saw a target-verify call "
            "(is ddbench installed in the server's Python, with SGLANG_PLUGINS=ddbench?)"
        )
    for p in processes:
        if p.unavailable:
            problems.append(f"{p.where}: {candidate} {p.unavailable}")
        if p.tripped or p.breaches:
            problems.append(f"{p.where}: breached; Triton served from then on")
        if p.fallbacks:
            problems.append(f"{p.where}: Triton served {p.fallbacks} call(s) in {candidate}'s place")
    if processes and figures["served_candidate"] == 0:
        problems.append(f"{candidate} served no target-verify call; Triton served {figures['served_triton']}")
    if problems:
        return GateCheck("served", FAIL, "; ".join(problems), figures)
    return GateCheck(
        "served",
        PASS,
        f"{candidate} served {figures['served_candidate']} target-verify call(s) in {len(processes)} "
        f"process(es), no breach, no fallback",
        figures,
        f"served {figures['served_candidate']}",
    )


def _merged(tables: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for table in tables:
        for reason, n in table.items():
            out[reason] = out.get(reason, 0) + n
    return out

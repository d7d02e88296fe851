"""A modeled run on the terminal: its tables, its notes (sampled counts, cases left out, registers unknown),
the sanitizer's verdicts and a verdict against a model baseline. Case IDs, calibration labels and
file-borne strings are printed as text, never as markup."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddbench.report.profile_tables import instruction_rows, stage_rows, sweep_rows, table_rows
from ddbench.results.modeled_case import ModeledCase
from ddbench.results.plan_sweep import PlanSweep


def rows_table(rows: list[dict[str, str]], title: str) -> Table:
    table = Table(title=escape(title))
    for col in rows[0] if rows else ["case"]:
        table.add_column(escape(col), overflow="fold")
    for row in rows:
        table.add_row(*(escape(v) for v in row.values()))
    return table


def print_profile(
    out: Console,
    cases: Sequence[ModeledCase],
    title: str,
    instructions: int = 0,
    source_lines: Mapping[str, str] | None = None,
) -> None:
    """The modeled figures, where each kernel's slowest CTA spends its time and, with `instructions`, the
    source lines that issue the most."""
    profiles = [c.profile for c in cases]
    out.print(rows_table(table_rows(profiles), title))
    if profiles:
        out.print(
            rows_table(stage_rows(profiles), "where each kernel's slowest CTA spends its time (modeled µs)")
        )
    rows = instruction_rows(profiles, instructions, source_lines) if instructions else []
    if rows:
        out.print(rows_table(rows, "where each kernel's warp instructions come from (modeled from its SASS)"))
    elif instructions:
        out.print("note: --instructions: unavailable: no SASS map (no nvcc or nvdisasm)", highlight=False)


def print_model_notes(
    out: Console, cases: Sequence[ModeledCase], left_out: int = 0, registers_known: bool = True
) -> None:
    for case in cases:
        if case.sampled:
            out.print(
                f"note: {escape(case.case_id)}: counted on one CTA per work shape; unique DRAM bytes derived "
                "from its addresses",
                highlight=False,
            )
    if left_out:
        out.print(f"note: --full-only left out {left_out} case(s) that would be sampled", highlight=False)
    if not registers_known:
        out.print("note: registers per thread unknown (no nvcc): occupancy ignores them", highlight=False)


def print_sanitizer(out: Console, cases: Sequence[ModeledCase]) -> None:
    checked = [c for c in cases if c.sanitizer is not None]
    dirty = [c for c in checked if c.sanitizer is not None and not c.sanitizer.clean]
    if checked:
        out.print(
            f"sanitizer: {len(checked) - len(dirty)} of {len(checked)} cases clean (racecheck, memcheck)",
            highlight=False,
        )
    for case in dirty:
        summary = case.sanitizer.summary if case.sanitizer is not None else ""
        out.print(f"[bold red]{escape(case.case_id)}[/]: {escape(summary)}", highlight=False)


def print_sweeps(out: Console, sweeps: Sequence[PlanSweep], gpu_name: str) -> None:
    if sweeps:
        out.print(rows_table(sweep_rows(sweeps), f"the plan beside its neighbours (modeled on {gpu_name})"))


def print_model_verdict(out: Console, regressions: Sequence[str], notes: Sequence[str], cases: int) -> None:
    for note in notes:
        out.print(f"note: {escape(note)}", highlight=False)
    for line in regressions:
        out.print(f"[bold red]REGRESSED[/] {escape(line)}", highlight=False)
    if not regressions:
        out.print(f"model baseline: no regression in {cases} cases", highlight=False)

"""`ddbench profile SUITE`: per case, the custom kernel's counters turned into a *modeled* time on a named
GPU, its floor, and the modeled Triton kernel; a table, and on request JSON, markdown and a PNG.

The counters come from one counted launch of the kernel under the CPU emulation, planned for the named GPU
(ddbench/runner/emulated_counters.py; exit 3 when the emulation cannot be built). `--counters FILE` takes
counters made elsewhere (a JSON object of case ID -> counters document).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from ddbench.atomic import check_writable, write_atomic, write_json_atomic
from ddbench.cli.common import FiniteFloatRange, load_suites, require_cases, select_cases, stdout
from ddbench.errors import InputError
from ddbench.gpus import GPUS, gpu_spec
from ddbench.kernel.build import find_kernels_dir
from ddbench.model.calibration import with_what_if
from ddbench.model.counters_input import parse_counters
from ddbench.model.kernel_time import LAUNCH_MODES
from ddbench.model.model_baseline import Tolerances, baseline_document, case_tolerances, regressions
from ddbench.model.profile import (
    CaseProfile,
    instruction_rows,
    profile_document,
    profile_markdown,
    stage_rows,
    table_rows,
)
from ddbench.report.profile_plot import profile_png
from ddbench.runner.emulated_counters import would_be_sampled
from ddbench.runner.model_plan_sweep import PlanSweep, sweep_plans
from ddbench.runner.model_profiles import calibration_of, model_cases
from ddbench.suite.load import read_json
from ddbench.suite.model import Case


def _counters_from_file(path: str, cases: list[Case]) -> dict[str, Mapping[str, Any]]:
    doc = read_json(Path(path), what="counters file")
    if not isinstance(doc, Mapping):
        raise InputError("must be an object of case ID -> counters document", file=path)
    missing = [c.id for c in cases if c.id not in doc]
    if missing:
        raise InputError(f"no counters for {len(missing)} selected case(s), first {missing[0]!r}", file=path)
    for c in cases:  # checked here, where the file is known, so an error names it
        parse_counters(doc[c.id], source=path, at=f"{c.id}.")
    return {c.id: doc[c.id] for c in cases}


def _print_table(rows: list[dict[str, str]], title: str) -> None:
    table = Table(title=title)
    for col in rows[0] if rows else ["case"]:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row.values())
    stdout.print(table)


def _print(profiles: list[CaseProfile], title: str, instructions: int) -> None:
    _print_table(table_rows(profiles), title)
    if profiles:
        _print_table(stage_rows(profiles), "where each kernel's slowest CTA spends its time (modeled µs)")
    rows = instruction_rows(profiles, instructions, _source_lines()) if instructions else []
    if rows:
        _print_table(rows, "where each kernel's warp instructions come from (modeled from its SASS)")
    elif instructions:
        stdout.print("note: --instructions: unavailable: no SASS map (no nvcc or nvdisasm)", highlight=False)


def _sweep_rows(sweeps: list[PlanSweep]) -> list[dict[str, str]]:
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


def _source_lines() -> dict[str, str]:
    """ "file:line" -> the line's text, of the kernels' sources (what the SASS map's lines name)."""
    lines = {}
    for path in find_kernels_dir().rglob("*.cuh"):
        for n, text in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            lines[f"{path.name}:{n}"] = text.strip()
    return lines


@click.command("profile")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-k", "filter_expr", help="Keep cases matching: words (tags or ID parts) with and/or/not.")
@click.option("--gpu", "gpu_key", type=click.Choice(sorted(GPUS)), default="rtx-pro-6000", show_default=True)
@click.option(
    "--launch",
    "launch_mode",
    type=click.Choice(LAUNCH_MODES),
    default="stream",
    show_default=True,
    help="Per-kernel overhead: a stream launch or a CUDA-graph node.",
)
@click.option(
    "--counters",
    "counters_path",
    type=click.Path(dir_okay=False),
    help="Counters made elsewhere: a JSON object of case ID -> counters document.",
)
@click.option(
    "--registers",
    "registers_path",
    type=click.Path(dir_okay=False),
    help="A `kernel-check --json` report (default: run ptxas when nvcc is installed).",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="Write the modeled profile as JSON."
)
@click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False), help="Write it as markdown.")
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False),
    help="Compare with a model baseline; exit 1 on any regression.",
)
@click.option(
    "--update-baseline",
    "update_path",
    type=click.Path(dir_okay=False),
    help="Write the profile as a model baseline (counters are exact: no noise refusal).",
)
@click.option(
    "--max-modeled-regression",
    type=FiniteFloatRange(min=0),
    default=0.01,
    show_default=True,
    help="With --baseline: modeled-µs growth allowed, relative (a case's budget `model` limits win).",
)
@click.option(
    "--max-cuda-over-triton",
    type=FiniteFloatRange(min=0),
    help="With --baseline: a ceiling on the modeled cuda/triton ratio (a case's budget `model` limits win).",
)
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG: modeled µs vs prefix."
)
@click.option(
    "--sanitize/--no-sanitize",
    default=True,
    show_default=True,
    help="Run the counted launch under the emulation's racecheck and memcheck; exit 1 on a finding.",
)
@click.option(
    "--what-if",
    "what_if",
    multiple=True,
    metavar="NAME=VALUE",
    help="Model with a table constant set by hand (e.g. issue_per_clk=1.5), labelled what-if; no baselines.",
)
@click.option(
    "--full-only",
    is_flag=True,
    help="Leave out the cases that would be counted on one CTA per work shape (big ones); say how many.",
)
@click.option(
    "--plan-sweep",
    is_flag=True,
    help="Also model each case beside the plan's choice (whole row tiles, other CTA counts, 32 or 48 rows, "
    "clusters of 8) and name its fastest neighbour: one emulated launch per variant.",
)
@click.option(
    "--instructions",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="List each kernel's N source lines that issue the most warp instructions (from its SASS).",
)
def profile_command(
    suites: tuple[str, ...],
    filter_expr: str | None,
    gpu_key: str,
    launch_mode: str,
    counters_path: str | None,
    registers_path: str | None,
    json_path: str | None,
    markdown_path: str | None,
    baseline_path: str | None,
    update_path: str | None,
    max_modeled_regression: float,
    max_cuda_over_triton: float | None,
    plot_path: str | None,
    sanitize: bool,
    full_only: bool,
    what_if: tuple[str, ...],
    instructions: int,
    plan_sweep: bool,
) -> None:
    """Model the custom kernel's time on a GPU from the emulation's counters (every figure is modeled)."""
    reads = [*suites, *(p for p in (counters_path, registers_path, baseline_path) if p)]
    outputs = (
        ("--json", json_path),
        ("--markdown", markdown_path),
        ("--plot", plot_path),
        ("--update-baseline", update_path),
    )
    for option, path in outputs:
        if path:
            check_writable(path, option, reads)
    if plan_sweep and counters_path:
        raise click.UsageError("--plan-sweep emulates each variant's launch: it does not take --counters")
    if what_if and (baseline_path or update_path):
        raise click.UsageError("--what-if asks the model a question: it neither writes nor judges a baseline")
    cases = select_cases(load_suites(suites), filter_expr)
    require_cases(cases, filter_expr)
    left_out = 0
    if full_only and counters_path is None:
        kept = [c for c in cases if not would_be_sampled(c)]
        left_out = len(cases) - len(kept)
        if not kept:
            raise InputError("--full-only: every selected case would be sampled", path="--full-only")
        cases = kept
    gpu = gpu_spec(gpu_key)
    calibration = with_what_if(calibration_of(gpu), what_if)
    given = None if counters_path is None else _counters_from_file(counters_path, cases)
    modeled = model_cases(cases, gpu, calibration, launch_mode, given, registers_path, sanitize)
    profiles, sources, notes = modeled.profiles, modeled.sources, modeled.notes
    title = f"modeled on {gpu.name} ({calibration.label}; error {calibration.error_band})"
    _print(profiles, title, instructions)
    for note in notes:
        stdout.print(f"note: {note}", highlight=False)
    if left_out:
        stdout.print(f"note: --full-only left out {left_out} case(s) that would be sampled", highlight=False)
    sanitized = modeled.sanitized
    dirty = {i: v for i, v in sanitized.items() if not v["clean"]}
    if sanitized:
        stdout.print(
            f"sanitizer: {len(sanitized) - len(dirty)} of {len(sanitized)} cases clean (racecheck, memcheck)",
            highlight=False,
        )
    for case_id, verdict in dirty.items():
        stdout.print(f"[bold red]{escape(case_id)}[/]: {escape(verdict['summary'])}", highlight=False)
    if not modeled.registers_known:
        stdout.print("note: registers per thread unknown (no nvcc): occupancy ignores them", highlight=False)
    sweeps = sweep_plans(cases, gpu, calibration, launch_mode, registers_path) if plan_sweep else []
    if sweeps:
        _print_table(_sweep_rows(sweeps), f"the plan beside its neighbours (modeled on {gpu.name})")
    if json_path:
        document = profile_document(profiles, gpu, calibration)
        if plan_sweep:
            document["plan_sweep"] = [s.to_json() for s in sweeps]
        for entry in document["cases"]:
            entry["counters_source"] = sources[entry["case"]]
            entry["sanitizer"] = sanitized.get(entry["case"])
        write_json_atomic(json_path, document)
    if markdown_path:
        write_atomic(markdown_path, profile_markdown(profiles, gpu, calibration))
    if plot_path:
        plot_title = f"modeled on {gpu.name}\n{calibration.label}; model error {calibration.error_band}"
        write_atomic(plot_path, profile_png(profiles, plot_title))
    if update_path:
        write_json_atomic(update_path, baseline_document(profiles, gpu.key, calibration.label))
    if baseline_path:
        tolerances = Tolerances(max_modeled_regression, max_cuda_over_triton)
        from_budgets = case_tolerances(cases, gpu.key)
        baseline = read_json(Path(baseline_path), what="model baseline")
        found, notes = regressions(
            profiles, baseline, gpu.key, calibration.label, tolerances, baseline_path, from_budgets
        )
        if from_budgets:
            notes.insert(0, f"{len(from_budgets)} case(s) judged by their budgets' model limits ({gpu.key})")
        for note in notes:
            stdout.print(f"note: {note}", highlight=False, markup=False)  # it quotes the file's calibration
        for line in found:
            stdout.print(f"[bold red]REGRESSED[/] {escape(line)}", highlight=False)
        if found:
            raise click.exceptions.Exit(1)
        stdout.print(f"model baseline: no regression in {len(profiles)} cases", highlight=False)
    if dirty:  # a race or an out-of-range access in the shipped kernel is a failure, whatever its speed
        raise click.exceptions.Exit(1)

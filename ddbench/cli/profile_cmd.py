"""`ddbench profile SUITE`: per case, the custom kernel's counters turned into a *modeled* time on a named
GPU, its floor, and the modeled Triton kernel; a table, and on request JSON, markdown and a PNG.

A thin face over the Session's modeled run (ddbench/runner/modeled_run.py): one counted launch of the
kernel under the CPU emulation per case, planned for the named GPU (exit 3 when the emulation cannot be
built), or counters made elsewhere (`--counters`). `--baseline` judges the run against a model baseline;
`--update-baseline` stores it through the one writer of model baselines, after the kernel's parity passed.
"""

from __future__ import annotations

from pathlib import Path

import click

from ddbench.atomic import check_writable
from ddbench.baselines.model_store import check_replaceable, read_model_baseline
from ddbench.cli.common import FiniteFloatRange, estimate_options, refuse_unfit, stderr, stdout
from ddbench.cli.model_baseline_update import ParityGate, write_model_baseline
from ddbench.cli.progress import ModelProgressSink
from ddbench.errors import InputError
from ddbench.gpus import GPUS
from ddbench.kernel.build import find_kernels_dir
from ddbench.model.kernel_time import LAUNCH_MODES
from ddbench.model.model_baseline import Tolerances
from ddbench.report.profile_console import (
    print_model_notes,
    print_model_verdict,
    print_profile,
    print_sanitizer,
    print_sweeps,
)
from ddbench.runner import Session, SessionOptions
from ddbench.runner.model_sinks import ProfilePaths
from ddbench.runner.modeled_run import ModelRequest


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
    "--parity-from",
    type=click.Path(dir_okay=False),
    help="With --update-baseline: the results of an earlier run that judged the kernel's parity "
    "(default: run it now).",
)
@estimate_options
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
    parity_from: str | None,
    max_memory: float | None,
    ignore_estimates: bool,
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
    reads = [*suites, *(p for p in (counters_path, registers_path, baseline_path, parity_from) if p)]
    outputs = ProfilePaths(json_path, markdown_path, plot_path)
    outputs.check(reads)
    if update_path:
        check_writable(update_path, "--update-baseline", reads)
    if plan_sweep and counters_path:
        raise click.UsageError("--plan-sweep emulates each variant's launch: it does not take --counters")
    if what_if and (baseline_path or update_path):
        raise click.UsageError("--what-if asks the model a question: it neither writes nor judges a baseline")
    if parity_from and not update_path:
        raise InputError("applies only with --update-baseline", path="--parity-from")
    request = ModelRequest(
        gpu_key, launch_mode, what_if, counters_path, registers_path, sanitize, full_only, plan_sweep
    )
    options = SessionOptions(suites=suites, filter_expr=filter_expr, model=request)
    session = Session(options)
    gate = None
    if update_path:  # what the update would refuse is refused before any work
        check_replaceable(Path(update_path), gpu_key)
        gate = ParityGate(parity_from, options, session.cases)
    baseline = None if baseline_path is None else read_model_baseline(Path(baseline_path), gpu_key)
    refuse_unfit(session, max_memory, ignore_estimates)
    with ModelProgressSink(stderr, len(session.cases)) as progress:
        outcome = session.run_modeled([*outputs.sinks(session), progress])
    gpu, calibration = outcome.gpu, outcome.calibration
    title = f"modeled on {gpu.name} ({calibration.label}; error {calibration.error_band})"
    print_profile(stdout, outcome.cases, title, instructions, _source_lines() if instructions else None)
    print_model_notes(stdout, outcome.cases, outcome.left_out, outcome.registers_known)
    print_sanitizer(stdout, outcome.cases)
    print_sweeps(stdout, [c.plan_sweep for c in outcome.cases if c.plan_sweep is not None], gpu.name)
    if update_path and gate is not None:
        gate.require(Path(update_path), stderr)
        write_model_baseline(Path(update_path), outcome, bool(filter_expr), stdout)
    if baseline is not None and baseline_path is not None:
        limits = Tolerances(max_modeled_regression, max_cuda_over_triton)
        verdict = outcome.judge(baseline, baseline_path, limits)
        print_model_verdict(stdout, verdict.regressions, verdict.notes, len(outcome.cases))
        if verdict.regressions:
            raise click.exceptions.Exit(1)
    # a race or an out-of-range access in the shipped kernel is a failure, whatever its speed
    if outcome.dirty:
        raise click.exceptions.Exit(1)

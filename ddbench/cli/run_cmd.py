"""`ddbench run SUITE...`: every selected case on every backend it needs, judged, reported as it goes."""

from __future__ import annotations

import click

from ddbench.backends.registry import split_names
from ddbench.cli.common import (
    estimate_options,
    refuse_unfit,
    stderr,
    stdout,
    suite_file_options,
    timing_override_options,
)
from ddbench.cli.outcome import print_outcome
from ddbench.cli.plan_table import plan_table
from ddbench.cli.progress import ProgressSink
from ddbench.environment import environment
from ddbench.runner import Session, SessionOptions
from ddbench.runner.sinks import OutputPaths, RunFacts
from ddbench.timing.settings import MODES


@click.command("run")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--backends", "backend_names", help="Comma-separated backends to run (default: those the bounds name)."
)
@click.option(
    "--backend",
    "backend_specs",
    multiple=True,
    metavar="MODULE:ATTR",
    help="Add your own backend (an instance, class or factory); repeatable.",
)
@click.option(
    "--as",
    "as_backend",
    metavar="BACKEND",
    help="Judge the backends no bound names (plug-ins, mutants) with this backend's bounds.",
)
@click.option(
    "--reference-only",
    "reference_only",
    metavar="A,B",
    help="Backends that are only a truth to compare against (no bound judges them, by intent).",
)
@click.option("-k", "filter_expr", help="Keep cases matching: words (tags or ID parts) with and/or/not.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="Results file, rewritten after each case."
)
@click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False), help="JUnit XML (one testcase per pair)."
)
@click.option(
    "--save-outputs", "outputs_dir", type=click.Path(file_okay=False), help="Save outputs per case here."
)
@click.option(
    "--timing/--no-timing", default=None, help="Time every case / no case (default: the cases with a budget)."
)
@click.option("--timing-mode", type=click.Choice(MODES), help="Override the budgets' timing mode (GPU only).")
@timing_override_options
@click.option(
    "--baseline",
    "baseline_file",
    type=click.Path(dir_okay=False),
    help="Baseline to judge regressions against (default: baselines/<device>/<suite>.json).",
)
@click.option(
    "--shard", help="i/n: run only every n-th case starting at the i-th (for several GPUs or jobs)."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print each case's backends and estimated peak memory and CPU time; run nothing.",
)
@estimate_options
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help="Markdown summary at the end (for CI step summaries, e.g. $GITHUB_STEP_SUMMARY).",
)
@suite_file_options
def run_command(
    suites: tuple[str, ...],
    backend_names: str | None,
    backend_specs: tuple[str, ...],
    as_backend: str | None,
    reference_only: str | None,
    filter_expr: str | None,
    json_path: str | None,
    junit_path: str | None,
    outputs_dir: str | None,
    timing: bool | None,
    timing_mode: str | None,
    max_rel_noise: float | None,
    max_seconds: float | None,
    baseline_file: str | None,
    shard: str | None,
    markdown_path: str | None,
    dry_run: bool,
    max_memory: float | None,
    ignore_estimates: bool,
    max_cases: int,
    allow_captures: tuple[str, ...],
) -> None:
    """Run suites: parity of every backend pair the suite bounds, on fresh seeded inputs; latency of the
    cases with a budget, judged against the stored baseline."""
    selected = split_names(backend_names)
    options = SessionOptions(
        suites=suites,
        max_cases=max_cases,
        allow_capture_dirs=allow_captures,
        filter_expr=filter_expr,
        shard=shard,
        backends=tuple(selected) if selected is not None else None,
        plugins=backend_specs,
        judge_as=as_backend,
        reference_only=tuple(split_names(reference_only) or ()),
        timing=timing,
        timing_mode=timing_mode,
        max_rel_noise=max_rel_noise,
        max_seconds=max_seconds,
        baseline_file=baseline_file,
    )
    outputs = OutputPaths(json=json_path, junit=junit_path, markdown=markdown_path, saved_outputs=outputs_dir)
    outputs.check(inputs=[*suites, *([baseline_file] if baseline_file else [])])
    session = Session(options)
    stderr.print(session.describe(), highlight=False)
    if dry_run:
        stdout.print(plan_table(session))
        return
    refuse_unfit(session, max_memory, ignore_estimates)
    sinks = outputs.sinks(
        RunFacts([s.path for s in session.suites], environment(), session.shard, filter_expr)
    )
    with ProgressSink(stderr, len(session.cases)) as progress:
        outcome = session.run([*sinks, progress])
    print_outcome(outcome, json_path)
    raise click.exceptions.Exit(outcome.exit_code)

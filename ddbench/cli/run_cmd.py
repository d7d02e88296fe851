"""`ddbench run SUITE...`: every selected case on every backend it needs, judged, reported as it goes."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ddbench.atomic import write_atomic
from ddbench.backends import preferred_device
from ddbench.backends.registry import split_names
from ddbench.baselines.device import device_key
from ddbench.baselines.lookup import BaselineSet
from ddbench.cli.common import (
    judged_as,
    load_suites,
    plugin_backends,
    resolve_backends,
    select_cases,
    stderr,
    stdout,
)
from ddbench.environment import environment
from ddbench.errors import InputError
from ddbench.metrics import ERROR, FAIL, SKIPPED
from ddbench.report.document import results_document
from ddbench.report.junit import write_junit
from ddbench.report.markdown_summary import summary_markdown
from ddbench.report.results_file import ResultsFile
from ddbench.report.saved_outputs import save_outputs
from ddbench.report.table import latency_table, results_table, skipped_summary
from ddbench.runner import CaseResult, backends_for, run_case
from ddbench.runner.budgets import budget_for
from ddbench.suite.select import select_shard
from ddbench.timing.settings import MODES

EXIT_PARITY_FAILURE = 1


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[case]}"),
        console=stderr,
        transient=True,
    )


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
    "--as", "as_backend", metavar="BACKEND", help="Judge the --backend plug-ins with this backend's bounds."
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
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help="Markdown summary at the end (for CI step summaries, e.g. $GITHUB_STEP_SUMMARY).",
)
def run_command(
    suites: tuple[str, ...],
    backend_names: str | None,
    backend_specs: tuple[str, ...],
    as_backend: str | None,
    filter_expr: str | None,
    json_path: str | None,
    junit_path: str | None,
    outputs_dir: str | None,
    timing: bool | None,
    timing_mode: str | None,
    baseline_file: str | None,
    shard: str | None,
    markdown_path: str | None,
) -> None:
    """Run suites: parity of every backend pair the suite bounds, on fresh seeded inputs; latency of the
    cases with a budget, judged against the stored baseline."""
    loaded = load_suites(suites)
    cases = select_shard(select_cases(loaded, filter_expr), shard)
    if not cases:
        raise InputError(f"no case matches -k {filter_expr!r}" if filter_expr else "the suites hold no case")
    selected = split_names(backend_names)
    plugins = plugin_backends(backend_specs)
    cases = judged_as(cases, plugins, as_backend)
    backends = resolve_backends(cases, selected, plugins)
    device = preferred_device()
    baselines = BaselineSet(device_key(device), Path(baseline_file) if baseline_file else None)
    stderr.print(f"{len(cases)} cases on {device.type}: backends {', '.join(backends)}", highlight=False)

    results_file = ResultsFile(json_path, [s.path for s in loaded], environment()) if json_path else None
    results: list[CaseResult] = []
    with _progress() as progress:
        task = progress.add_task("cases", total=len(cases), case="")
        for case in cases:
            progress.update(task, case=case.id)
            needed = {n: backends[n] for n in backends_for(case, selected, list(plugins))}
            budget = budget_for(case, timing, timing_mode)
            result = run_case(case, needed, device, budget, baselines.latency(case) if budget else None)
            results.append(result)
            if results_file:
                results_file.add(result)
            if outputs_dir:
                save_outputs(outputs_dir, result)
            if not progress.live.is_started or not stderr.is_terminal:
                stderr.print(
                    f"[{len(results)}/{len(cases)}] {result.status} {case.id} ({result.seconds:.2f}s)",
                    highlight=False,
                )
            progress.advance(task)
    if results_file:
        results_file.finish()
    if junit_path:
        write_junit(junit_path, results)
    if markdown_path:
        document = (
            results_file.document
            if results_file
            else results_document(results, [s.path for s in loaded], environment())
        )
        write_atomic(markdown_path, summary_markdown(document))

    stdout.print(results_table(results))
    if note := skipped_summary(results):
        stdout.print(note, highlight=False)
    if any(r.timing for r in results):
        stdout.print(latency_table(results))
    failed = [r for r in results if r.status in (FAIL, ERROR)]
    judged = [r for r in results if r.status != SKIPPED]
    summary = f"{len(results) - len(failed)} passed, {len(failed)} failed"
    stdout.print(summary + (f" (results: {Path(json_path)})" if json_path else ""), highlight=False)
    if failed:
        raise click.exceptions.Exit(EXIT_PARITY_FAILURE)
    if not judged:
        stderr.print("no parity bound could be judged: the backends its pairs name were not run")
        raise click.exceptions.Exit(EXIT_PARITY_FAILURE)

"""`ddbench baseline update | show | diff`: stored latency baselines, per device and suite."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ddbench.atomic import check_writable_folder
from ddbench.backends import preferred_device
from ddbench.backends.registry import split_names
from ddbench.baselines.compare import compare_tables, latency_table_of
from ddbench.baselines.device import device_key
from ddbench.baselines.entries import baseline_entries, refusals
from ddbench.baselines.latency_source import check_same_origin, read_latency_source
from ddbench.baselines.model_store import check_replaceable, model_baseline_path
from ddbench.baselines.store import (
    DEFAULT_ROOT,
    baseline_path,
    load_baseline,
    read_json_bounded,
    update_baseline,
)
from ddbench.baselines.store import FORMAT as BASELINE_FORMAT
from ddbench.cli.common import (
    load_suites,
    stderr,
    stdout,
    suite_file_options,
    timing_override_options,
)
from ddbench.cli.model_baseline_update import (
    ParityGate,
    diff_model_files,
    is_model_baseline,
    write_model_baseline,
)
from ddbench.cli.progress import ProgressSink
from ddbench.environment import environment
from ddbench.errors import InputError
from ddbench.gpus import GPUS
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.report.profile_console import print_model_notes
from ddbench.runner import Session, SessionOptions
from ddbench.runner.modeled_run import ModelRequest

EXIT_REFUSED = 1
DEFAULT_TOLERANCE = 0.05  # latency slowdown `baseline diff` allows


@click.group("baseline")
def baseline_group() -> None:
    """Stored latency baselines (and model baselines, --model): update after a kernel change, show, diff."""


@baseline_group.command("update")
@click.argument("suite")
@click.option("--backends", "backend_names", help="Comma-separated backends to run and time.")
@click.option(
    "--backend", "backend_specs", multiple=True, metavar="MODULE:ATTR", help="Add your own backend."
)
@click.option("--as", "as_backend", metavar="BACKEND", help="Judge the plug-ins with this backend's bounds.")
@click.option("-k", "filter_expr", help="Only the cases matching this filter.")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
@timing_override_options
@click.option(
    "--strict", is_flag=True, help="Refuse the whole update if any case was too noisy (default: skip it)."
)
@click.option(
    "--model",
    "model_gpu",
    type=click.Choice(sorted(GPUS)),
    help="Write the model baseline <root>/model-<GPU>/<suite>.json from the emulation's exact counters.",
)
@click.option(
    "--parity-from",
    type=click.Path(dir_okay=False),
    help="With --model: the results of an earlier run that judged the kernel's parity (default: run it now).",
)
@suite_file_options
def update_command(
    suite: str,
    backend_names: str | None,
    backend_specs: tuple[str, ...],
    as_backend: str | None,
    filter_expr: str | None,
    root: str,
    max_rel_noise: float | None,
    max_seconds: float | None,
    strict: bool,
    model_gpu: str | None,
    parity_from: str | None,
    max_cases: int,
    allow_captures: tuple[str, ...],
) -> None:
    """Time the suite and store the result — only cases whose parity passed and whose timing was quiet.

    A parity failure anywhere refuses the whole update (the kernel is wrong); a noisy case is left out
    (its old entry kept) unless --strict. With --model: the modeled figures (docs/model.md)."""
    check_writable_folder(root, "--root")
    selected = split_names(backend_names)
    options = SessionOptions(
        suites=(suite,),
        max_cases=max_cases,
        allow_capture_dirs=allow_captures,
        filter_expr=filter_expr,
        backends=tuple(selected) if selected is not None else None,
        plugins=backend_specs,
        judge_as=as_backend,
        timing=model_gpu is None,
        max_rel_noise=max_rel_noise,
        max_seconds=max_seconds,
    )
    if model_gpu is not None:
        _update_model(options, model_gpu, Path(root), parity_from, strict)
        return
    if parity_from is not None:
        raise InputError("applies only with --model", path="--parity-from")
    session = Session(options)
    (loaded,) = session.suites
    path = baseline_path(device_key(session.device), loaded.name, Path(root))
    env, kernel_hash = environment(), kernel_sources_hash()
    with ProgressSink(stderr, len(session.cases)) as progress:
        outcome = session.run([progress])
    new_entries, blocking, noisy = {}, [], []
    for result in outcome.results:
        reasons = refusals(result)
        noise_only = reasons and all(r.kind == "noise" for r in reasons)
        if not reasons:
            new_entries[result.case.id] = baseline_entries(result, env, kernel_hash)
        elif noise_only and not strict:
            noisy += [f"{result.case.id}: {r}" for r in reasons]
        else:
            blocking += [f"{result.case.id}: {r}" for r in reasons]
    for line in noisy:
        stderr.print(f"left out (old entry kept): {escape(line)}", highlight=False)
    if blocking:
        for line in blocking:
            stderr.print(f"refused: {escape(line)}", highlight=False)
        stderr.print(
            f"baseline not updated: {len(blocking)} problem(s); {path} is unchanged", highlight=False
        )
        raise click.exceptions.Exit(EXIT_REFUSED)
    if not new_entries:
        stderr.print(f"baseline not updated: no case was quiet enough; {path} is unchanged", highlight=False)
        raise click.exceptions.Exit(EXIT_REFUSED)
    # Under the file's lock: re-read, merge, write, so a concurrent update's entries are never lost.
    stored_before, stored_after = update_baseline(path, device_key(session.device), loaded.name, new_entries)
    before = latency_table_of(stored_before.to_json(), str(path))
    after = latency_table_of(stored_after.to_json(), str(path))
    changed = [
        c
        for c in compare_tables(before, after, 0.0)
        if (c.case, c.backend) in after and c.case in new_entries
    ]
    stdout.print(_changes_table(changed, f"updated {path}"))


def _update_model(
    options: SessionOptions, gpu_key: str, root: Path, parity_from: str | None, strict: bool
) -> None:
    timing_only = (("--max-rel-noise", options.max_rel_noise), ("--max-seconds", options.max_seconds))
    for name, value in (*timing_only, ("--strict", strict or None)):
        if value is not None:
            raise InputError("counts are exact: there is no noise to limit with --model", path=name)
    modeled = Session(dataclasses.replace(options, model=ModelRequest(gpu_key)))
    (suite,) = modeled.suites
    path = model_baseline_path(root, gpu_key, suite.name)
    check_replaceable(path, gpu_key)  # refused before any work
    ParityGate(parity_from, options, modeled.cases).require(path, stderr)
    outcome = modeled.run_modeled()
    print_model_notes(stdout, outcome.cases, outcome.left_out, outcome.registers_known)
    write_model_baseline(path, outcome, bool(options.filter_expr), stdout)


@baseline_group.command("show")
@click.argument("source")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
def show_command(source: str, root: str) -> None:
    """Show a baseline file, or the stored baseline of a suite on this device."""
    path, device, suite = _baseline_file_for(source, Path(root))
    baseline = load_baseline(path, device=device, suite=suite)
    if baseline is None:
        raise InputError("no baseline stored for this device and suite", file=str(path))
    table = Table(title=f"{path} ({baseline.device})", title_justify="left")
    for column in ("case", "backend", "median us", "IQR us", "noise", "samples", "mode", "date", "kernel"):
        table.add_column(column, no_wrap=column in ("case", "backend"))
    for case_id in sorted(baseline.entries):
        for name, entry in sorted(baseline.entries[case_id].items()):
            s = entry.latency
            table.add_row(
                escape(case_id),
                escape(name),
                f"{s.median_us:.2f}",
                f"{s.iqr_us:.2f}",
                f"{s.rel_noise:.1%}",
                str(s.samples),
                escape(entry.mode or ""),
                escape(entry.date or ""),
                escape(entry.kernel_hash or ""),
            )
    stdout.print(table)


@baseline_group.command("diff")
@click.argument("before")
@click.argument("after", required=False)
@click.option(
    "--tolerance", type=float, help="Slowdown allowed (default 5 %; 1 % of modeled µs for model baselines)."
)
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
@click.option(
    "--allow-mismatch",
    is_flag=True,
    help="Compare files of different devices or suites (refused by default: their latencies differ anyway).",
)
def diff_command(
    before: str, after: str | None, tolerance: float | None, root: str, allow_mismatch: bool
) -> None:
    """Two baseline (or results) files; or a results file against the stored baseline of its suite (one
    argument). Exits 1 when a backend regressed. Two model baselines: per case, the counters and modeled
    figures that changed; exits 1 on any count that rose or a modeled time past the tolerance."""
    if tolerance is not None and (not math.isfinite(tolerance) or tolerance < 0):
        raise InputError(f"must be a finite number >= 0, got {tolerance!r}", path="--tolerance")
    if after is not None and any(is_model_baseline(Path(p)) for p in (before, after)):
        diff_model_files(before, after, tolerance, allow_mismatch, stdout)
        return
    tolerance = DEFAULT_TOLERANCE if tolerance is None else tolerance
    if after is None:
        after_source = read_latency_source(Path(before))
        if after_source.kind != "results":
            raise InputError("give two files to compare, or one results file", file=before)
        if len(after_source.suites) != 1:
            raise InputError(
                "give the baseline to compare with: the results hold "
                + (f"{len(after_source.suites)} suites" if after_source.suites else "no case"),
                file=before,
            )
        (suite,) = after_source.suites
        stored = baseline_path(after_source.device, suite, Path(root))  # the machine that measured
        if not stored.exists():
            raise InputError(
                f"no baseline stored for device {after_source.device} / suite {suite}", file=str(stored)
            )
        before_source = read_latency_source(stored)
    else:
        before_source, after_source = read_latency_source(Path(before)), read_latency_source(Path(after))
    if not allow_mismatch:
        check_same_origin(before_source, after_source)
    try:
        changes = compare_tables(before_source.table, after_source.table, tolerance)
    except ValueError as err:  # only reachable through figures the readers did not check
        raise InputError(str(err)) from None
    title = f"{before_source.file} -> {after_source.file} (tolerance {tolerance:.0%}, noise-aware)"
    stdout.print(_changes_table(changes, escape(title)))
    regressed = [c for c in changes if c.regressed]
    stdout.print(
        f"{len(regressed)} regressed, {sum(c.improved for c in changes)} improved, {len(changes)} compared",
        highlight=False,
    )
    if regressed:  # a CI gate, like nvbench's compare script
        raise click.exceptions.Exit(EXIT_REFUSED)


def _baseline_file_for(source: str, root: Path) -> tuple[Path, str | None, str | None]:
    """(baseline file, device and suite it must be of): the file itself, or the suite's stored baseline."""
    path = Path(source)
    document = read_json_bounded(path)
    if isinstance(document, dict) and document.get("format") == BASELINE_FORMAT:
        return path, None, None
    (suite,) = load_suites([source])
    device = device_key(preferred_device())
    return baseline_path(device, suite.name, root), device, suite.name


def _changes_table(changes, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("case", "backend", "before us", "after us", "change", "verdict"):
        table.add_column(column, no_wrap=column in ("case", "backend"))
    for c in changes:
        verdict = (
            "[bold red]slower[/]"
            if c.regressed
            else "[green]faster[/]"
            if c.improved
            else "new"
            if c.before is None
            else "removed"
            if c.after is None
            else "same"
        )
        table.add_row(
            escape(c.case),
            escape(c.backend),
            f"{c.before.median_us:.2f}" if c.before else "-",
            f"{c.after.median_us:.2f}" if c.after else "-",
            f"{c.change:+.1%}" if c.change is not None else "",
            verdict,
        )
    return table

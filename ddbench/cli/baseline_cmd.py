"""`ddbench baseline update | show | diff`: stored latency baselines, per device and suite."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ddbench.atomic import check_writable
from ddbench.backends import preferred_device
from ddbench.backends.registry import split_names
from ddbench.baselines.compare import compare_tables, latency_table_of
from ddbench.baselines.device import device_key, device_key_from_facts
from ddbench.baselines.entries import baseline_entries, refusal_reasons
from ddbench.baselines.store import DEFAULT_ROOT, BaselineFile, baseline_path, load_baseline, save_baseline
from ddbench.cli.common import load_suites, stderr, stdout
from ddbench.cli.progress import ProgressSink
from ddbench.environment import environment
from ddbench.errors import InputError
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.runner import Session, SessionOptions
from ddbench.suite.load import read_json
from ddbench.timing.stats import LatencyStats

EXIT_REFUSED = 1


@click.group("baseline")
def baseline_group() -> None:
    """Stored latency baselines: update after a kernel change, show, diff."""


@baseline_group.command("update")
@click.argument("suite")
@click.option("--backends", "backend_names", help="Comma-separated backends to run and time.")
@click.option(
    "--backend", "backend_specs", multiple=True, metavar="MODULE:ATTR", help="Add your own backend."
)
@click.option("--as", "as_backend", metavar="BACKEND", help="Judge the plug-ins with this backend's bounds.")
@click.option("-k", "filter_expr", help="Only the cases matching this filter.")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
@click.option(
    "--max-rel-noise",
    type=click.FloatRange(min=0.0, min_open=True),
    help="Override timing.max_rel_noise: the noise above which a case is left out.",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0.0, min_open=True),
    help="Override timing.max_seconds: more sampling time lowers the noise of a slow case.",
)
@click.option(
    "--strict", is_flag=True, help="Refuse the whole update if any case was too noisy (default: skip it)."
)
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
) -> None:
    """Time the suite and store the result — only cases whose parity passed and whose timing was quiet.

    A parity failure anywhere refuses the whole update (the kernel is wrong); a noisy case is left out
    (its old entry kept) unless --strict."""
    check_writable(root, "--root", directory=True)
    selected = split_names(backend_names)
    session = Session(
        SessionOptions(
            suites=(suite,),
            filter_expr=filter_expr,
            backends=tuple(selected) if selected is not None else None,
            plugins=backend_specs,
            judge_as=as_backend,
            timing=True,
            max_rel_noise=max_rel_noise,
            max_seconds=max_seconds,
        )
    )
    (loaded,) = session.suites
    path = baseline_path(device_key(session.device), loaded.name, Path(root))
    env, kernel_hash = environment(), kernel_sources_hash()
    with ProgressSink(stderr, len(session.cases)) as progress:
        outcome = session.run([progress])
    new_entries, blocking, noisy = {}, [], []
    for result in outcome.results:
        reasons = refusal_reasons(result)
        noise_only = reasons and all(" noise " in r for r in reasons)
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
    current = load_baseline(path) or BaselineFile(device_key(session.device), loaded.name)
    before = latency_table_of(current.to_json(), str(path))
    for case_id, entries in new_entries.items():
        current.entries.setdefault(case_id, {}).update(entries)
    save_baseline(path, current)
    after = latency_table_of(current.to_json(), str(path))
    changed = [
        c
        for c in compare_tables(before, after, 0.0)
        if (c.case, c.backend) in after and c.case in new_entries
    ]
    stdout.print(_changes_table(changed, f"updated {path}"))


@baseline_group.command("show")
@click.argument("source")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
def show_command(source: str, root: str) -> None:
    """Show a baseline file, or the stored baseline of a suite on this device."""
    path = _baseline_file_for(source, Path(root))
    baseline = load_baseline(path)
    if baseline is None:
        raise InputError("no baseline stored for this device and suite", file=str(path))
    table = Table(title=f"{path} ({baseline.device})", title_justify="left")
    for column in ("case", "backend", "median us", "IQR us", "noise", "samples", "mode", "date", "kernel"):
        table.add_column(column, no_wrap=column in ("case", "backend"))
    for case_id in sorted(baseline.entries):
        for name, entry in sorted(baseline.entries[case_id].items()):
            s = LatencyStats.from_json(entry["latency"])  # load_baseline checked every entry
            table.add_row(
                case_id,
                name,
                f"{s.median_us:.2f}",
                f"{s.iqr_us:.2f}",
                f"{s.rel_noise:.1%}",
                str(s.samples),
                str(entry.get("mode", "")),
                str(entry.get("date", "")),
                entry.get("kernel_hash") or "",
            )
    stdout.print(table)


@baseline_group.command("diff")
@click.argument("before")
@click.argument("after", required=False)
@click.option("--tolerance", type=float, default=0.05, show_default=True, help="Slowdown allowed.")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
def diff_command(before: str, after: str | None, tolerance: float, root: str) -> None:
    """Two baseline files; or a results file against the stored baseline of its suite (one argument)."""
    if after is None:
        results = read_json(Path(before))
        suites = results.get("suites", []) if isinstance(results, dict) else []
        if len(suites) != 1:
            raise InputError(
                "give the baseline to compare with: the results hold several suites", file=before
            )
        (suite,) = load_suites(suites)
        device = results.get("environment", {}).get("device", {})
        key = device_key_from_facts(device)  # the machine that measured, not the one diffing
        before, after = str(baseline_path(key, suite.name, Path(root))), before
    tables = [_latency_of(Path(p)) for p in (before, after)]
    changes = compare_tables(tables[0], tables[1], tolerance)
    stdout.print(_changes_table(changes, f"{before} -> {after} (tolerance {tolerance:.0%}, noise-aware)"))
    regressed = [c for c in changes if c.regressed]
    stdout.print(
        f"{len(regressed)} regressed, {sum(c.improved for c in changes)} improved, {len(changes)} compared",
        highlight=False,
    )
    if regressed:  # a CI gate, like nvbench's compare script
        raise click.exceptions.Exit(EXIT_REFUSED)


def _latency_of(path: Path):
    """A baseline file (checked entry by entry) or a results file, as (case, backend) -> latency."""
    document = read_json(path)
    if isinstance(document, dict) and document.get("format") == "ddbench-baseline":
        load_baseline(path)
    return latency_table_of(document, str(path))


def _baseline_file_for(source: str, root: Path) -> Path:
    path = Path(source)
    document = read_json(path)
    if isinstance(document, dict) and document.get("format") == "ddbench-baseline":
        return path
    (suite,) = load_suites([source])
    return baseline_path(device_key(preferred_device()), suite.name, root)


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
            c.case,
            c.backend,
            f"{c.before.median_us:.2f}" if c.before else "-",
            f"{c.after.median_us:.2f}" if c.after else "-",
            f"{c.change:+.1%}" if c.change is not None else "",
            verdict,
        )
    return table

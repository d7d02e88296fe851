"""`ddbench baseline update | show | diff`: stored latency baselines, per device and suite."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from ddbench.backends import preferred_device
from ddbench.backends.registry import split_names
from ddbench.baselines.compare import compare_tables, latency_table_of
from ddbench.baselines.device import device_key, device_key_from_facts
from ddbench.baselines.entries import baseline_entries, refusal_reasons
from ddbench.baselines.store import DEFAULT_ROOT, BaselineFile, baseline_path, load_baseline, save_baseline
from ddbench.cli.common import load_suites, resolve_backends, select_cases, stderr, stdout
from ddbench.environment import environment
from ddbench.errors import InputError
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.runner import backends_for, run_case
from ddbench.runner.budgets import budget_for
from ddbench.suite.load import read_json
from ddbench.timing.stats import LatencyStats

EXIT_REFUSED = 1


@click.group("baseline")
def baseline_group() -> None:
    """Stored latency baselines: update after a kernel change, show, diff."""


@baseline_group.command("update")
@click.argument("suite")
@click.option("--backends", "backend_names", help="Comma-separated backends to run and time.")
@click.option("-k", "filter_expr", help="Only the cases matching this filter.")
@click.option("--root", type=click.Path(file_okay=False), default=str(DEFAULT_ROOT), show_default=True)
def update_command(suite: str, backend_names: str | None, filter_expr: str | None, root: str) -> None:
    """Time the suite and store the result — only if every case passed parity and was timed quietly."""
    (loaded,) = load_suites([suite])
    cases = select_cases([loaded], filter_expr)
    if not cases:
        raise InputError(f"no case matches -k {filter_expr!r}" if filter_expr else "the suite holds no case")
    selected = split_names(backend_names)
    backends = resolve_backends(cases, selected, {})
    device = preferred_device()
    path = baseline_path(device_key(device), loaded.name, Path(root))
    current = load_baseline(path) or BaselineFile(device_key(device), loaded.name)
    env, kernel_hash = environment(), kernel_sources_hash()
    new_entries, refusals = {}, []
    for i, case in enumerate(cases, 1):
        needed = {n: backends[n] for n in backends_for(case, selected, [])}
        result = run_case(case, needed, device, budget_for(case, True))
        stderr.print(f"[{i}/{len(cases)}] {result.status} {case.id}", highlight=False)
        if reasons := refusal_reasons(result):
            refusals += [f"{case.id}: {r}" for r in reasons]
        else:
            new_entries[case.id] = baseline_entries(result, env, kernel_hash)
    if refusals:
        for line in refusals:
            stderr.print(f"refused: {escape(line)}", highlight=False)
        stderr.print(
            f"baseline not updated: {len(refusals)} problem(s); {path} is unchanged", highlight=False
        )
        raise click.exceptions.Exit(EXIT_REFUSED)
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

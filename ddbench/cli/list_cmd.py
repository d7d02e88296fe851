"""`ddbench list SUITE...`: the expanded cases as a table (or their IDs, or JSON), each with an estimate of
its peak memory and CPU time so a case too big for the machine is seen before it runs."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click
from rich.table import Table

from ddbench.backends.cost import Estimate, estimate_case
from ddbench.cli.common import load_suites, select_cases, stdout, suite_file_options
from ddbench.report.table import cases_table
from ddbench.runner.roles import default_backends
from ddbench.suite import Case


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def with_column(table: Table, header: str, cells: Sequence[str]) -> Table:
    """A copy of `table` with one more column (rich cannot add a column once rows exist)."""
    out = Table(title=table.title, title_justify=table.title_justify)
    for column in table.columns:
        out.add_column(column.header, overflow=column.overflow, justify=column.justify)
    out.add_column(header, overflow="fold", justify="right")
    for row, extra in zip(zip(*(list(c.cells) for c in table.columns), strict=True), cells, strict=True):
        out.add_row(*row, extra)
    return out


def case_estimates(cases: Sequence[Case], device: str) -> list[Estimate]:
    """Each case's estimate for the backends it runs by default."""
    return [estimate_case(case, default_backends(case), device) for case in cases]


@click.command("list")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-k", "filter_expr", help="Keep cases matching: words (tags or ID parts) with and/or/not.")
@click.option("--ids", is_flag=True, help="Print only the case IDs, one per line.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the expanded cases, each with its estimate, as JSON."
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    help="Estimate for this device (default: cuda where a GPU is visible, else cpu).",
)
@suite_file_options
def list_command(
    suites: tuple[str, ...],
    filter_expr: str | None,
    ids: bool,
    as_json: bool,
    device: str | None,
    max_cases: int,
    allow_captures: tuple[str, ...],
) -> None:
    """Show the cases a suite expands to, with an estimate of each one's peak memory and CPU time."""
    loaded = load_suites(suites, max_cases=max_cases, allow_capture_dirs=allow_captures)
    cases = select_cases(loaded, filter_expr)
    if ids:
        for case in cases:
            click.echo(case.id)
        return
    device = device or default_device()
    estimates = case_estimates(cases, device)
    if as_json:
        document = {
            "suites": [{"name": s.name, "path": s.path} for s in loaded],
            "device": device,
            "cases": [
                {**case.to_json(), "estimate": estimate.to_json()}
                for case, estimate in zip(cases, estimates, strict=True)
            ],
        }
        click.echo(json.dumps(document, indent=2))
        return
    title = ", ".join(s.name for s in loaded) + f": {len(cases)} cases"
    column = f"estimate ({device})"
    stdout.print(with_column(cases_table(cases, title), column, [e.text for e in estimates]))

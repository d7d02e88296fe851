"""`ddbench list SUITE...`: the expanded cases as a table (or their IDs)."""

from __future__ import annotations

import click

from ddbench.cli.common import load_suites, select_cases, stdout
from ddbench.report.table import cases_table


@click.command("list")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-k", "filter_expr", help="Keep cases matching: words (tags or ID parts) with and/or/not.")
@click.option("--ids", is_flag=True, help="Print only the case IDs, one per line.")
def list_command(suites: tuple[str, ...], filter_expr: str | None, ids: bool) -> None:
    """Show the cases a suite expands to."""
    loaded = load_suites(suites)
    cases = select_cases(loaded, filter_expr)
    if ids:
        for case in cases:
            click.echo(case.id)
        return
    title = ", ".join(s.name for s in loaded) + f": {len(cases)} cases"
    stdout.print(cases_table(cases, title))

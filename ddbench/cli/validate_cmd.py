"""`ddbench validate SUITE...`: schema and semantic checks; exit 2 if any file is invalid."""

from __future__ import annotations

import click

from ddbench.cli.common import stdout
from ddbench.errors import InputError, SuiteInvalid
from ddbench.suite import load_suite


@click.command("validate")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate_command(suites: tuple[str, ...]) -> None:
    """Check suite files without running anything."""
    invalid = 0
    for path in suites:
        try:
            suite = load_suite(path)
        except InputError as err:
            invalid += 1
            for problem in err.errors if isinstance(err, SuiteInvalid) else [err]:
                click.echo(f"invalid: {problem.message}", err=True)
            continue
        stdout.print(f"ok: {path} ({suite.name}, {len(suite.cases)} cases)", highlight=False)
    if invalid:
        raise click.exceptions.Exit(2)

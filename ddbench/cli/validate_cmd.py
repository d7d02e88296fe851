"""`ddbench validate SUITE...`: schema and semantic checks; exit 2 if any file is invalid."""

from __future__ import annotations

import click

from ddbench.cli.common import stdout, suite_file_options
from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file


@click.command("validate")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@suite_file_options
def validate_command(suites: tuple[str, ...], max_cases: int, allow_captures: tuple[str, ...]) -> None:
    """Check suite files without running anything."""
    invalid = 0
    for path in suites:
        try:
            suite = load_suite_file(path, max_cases=max_cases, allow_capture_dirs=allow_captures)
        except InputError as err:
            invalid += 1
            for problem in err.errors if isinstance(err, SuiteInvalid) else [err]:
                click.echo(f"invalid: {problem.message}", err=True)
            continue
        stdout.print(f"ok: {path} ({suite.name}, {len(suite.cases)} cases)", highlight=False)
    if invalid:
        raise click.exceptions.Exit(2)

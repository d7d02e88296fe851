"""`ddbench validate SUITE...`: schema and semantic checks; exit 2 if any file is invalid."""

from __future__ import annotations

import json
from typing import Any

import click

from ddbench.cli.common import stdout, suite_file_options
from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file


def problem_json(problem: InputError) -> dict[str, Any]:
    """One error as an object a program can read: the file, the JSON path of the field, the reason."""
    return {"file": problem.file, "path": problem.path, "reason": problem.reason, "message": problem.message}


@click.command("validate")
@click.argument("suites", nargs=-1, required=True, type=click.Path(dir_okay=False))
@suite_file_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: per file, ok or its errors.")
def validate_command(
    suites: tuple[str, ...], max_cases: int, allow_captures: tuple[str, ...], as_json: bool
) -> None:
    """Check suite files without running anything."""
    invalid = 0
    files: list[dict[str, Any]] = []
    for path in suites:
        try:
            suite = load_suite_file(path, max_cases=max_cases, allow_capture_dirs=allow_captures)
        except InputError as err:
            invalid += 1
            problems = err.errors if isinstance(err, SuiteInvalid) else [err]
            files.append({"path": path, "ok": False, "errors": [problem_json(p) for p in problems]})
            if not as_json:
                for problem in problems:
                    click.echo(f"invalid: {problem.message}", err=True)
            continue
        files.append({"path": path, "ok": True, "suite": suite.name, "cases": len(suite.cases)})
        if not as_json:
            stdout.print(f"ok: {path} ({suite.name}, {len(suite.cases)} cases)", highlight=False)
    if as_json:
        click.echo(json.dumps({"ok": not invalid, "files": files}, indent=2))
    if invalid:
        raise click.exceptions.Exit(2)

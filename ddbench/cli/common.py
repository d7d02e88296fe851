"""Pieces shared by the commands: loading suites with every error reported, selecting cases."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from ddbench.errors import InputError, SuiteInvalid
from ddbench.suite import Case, Suite, load_suite
from ddbench.suite.select import case_filter

# Files and CI logs get wide tables: case IDs are long, and folding them makes them impossible to grep.
_WIDTH_OFF_TERMINAL = 200
stdout = Console(soft_wrap=False)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=False, width=_WIDTH_OFF_TERMINAL)
stderr = Console(stderr=True)


def load_suites(paths: Sequence[str]) -> list[Suite]:
    """Load every file, then fail with all problems of all files at once."""
    suites, problems = [], []
    for path in paths:
        try:
            suites.append(load_suite(path))
        except SuiteInvalid as err:
            problems += err.errors
        except InputError as err:
            problems.append(err)
    if problems:
        raise SuiteInvalid(problems)
    return suites


def select_cases(suites: Sequence[Suite], expression: str | None) -> list[Case]:
    keep = case_filter(expression)
    return [case for suite in suites for case in suite.cases if keep(case)]

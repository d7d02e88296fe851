"""Which cases a run takes: every suite file loaded (all problems of all files at once), -k, then --shard."""

from __future__ import annotations

from collections.abc import Sequence

from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file
from ddbench.suite import Case, Suite
from ddbench.suite.case_count import DEFAULT_MAX_CASES
from ddbench.suite.select import case_filter, select_shard


def load_suites(
    paths: Sequence[str], *, max_cases: int = DEFAULT_MAX_CASES, allow_capture_dirs: Sequence[str] = ()
) -> list[Suite]:
    """Load every file (captures confined to its folder or `allow_capture_dirs`, at most `max_cases` cases
    each), then fail with all problems of all files at once."""
    suites, problems = [], []
    for path in paths:
        try:
            suites.append(load_suite_file(path, max_cases=max_cases, allow_capture_dirs=allow_capture_dirs))
        except SuiteInvalid as err:
            problems += err.errors
        except InputError as err:
            problems.append(err)
    if problems:
        raise SuiteInvalid(problems)
    return suites


def select_cases(suites: Sequence[Suite], expression: str | None, shard: str | None = None) -> list[Case]:
    """The cases `-k` keeps, in file order, then this shard's share; a suite named twice counts once."""
    keep = case_filter(expression)
    seen: set[str] = set()
    cases = []
    for suite in suites:
        for case in suite.cases:
            if keep(case) and case.id not in seen:
                seen.add(case.id)
                cases.append(case)
    return select_shard(cases, shard)


def require_cases(cases: Sequence[Case], expression: str | None, shard: str | None = None) -> None:
    if cases:
        return
    if shard:
        raise InputError(
            f"shard {shard} holds none of the selected cases (fewer cases than shards)", path="--shard"
        )
    raise InputError(f"no case matches -k {expression!r}" if expression else "the suites hold no case")

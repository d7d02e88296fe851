"""Pieces shared by the commands: loading suites with every error reported, selecting cases."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from rich.console import Console

from ddbench.backends import Backend, get_backend, load_backend_spec
from ddbench.errors import BackendUnavailable, InputError, SuiteInvalid
from ddbench.runner import backends_for
from ddbench.suite import Case, Suite, load_suite
from ddbench.suite.model import ANY_BACKEND
from ddbench.suite.select import case_filter


def colour_settings(env: Mapping[str, str]) -> dict[str, object]:
    """NO_COLOR (https://no-color.org: set and not empty) wins over FORCE_COLOR: rich alone still writes
    escape codes with both set. None means no escape codes at all, colour or bold."""
    return {"color_system": None} if env.get("NO_COLOR") else {}


# Files and CI logs get wide tables: case IDs are long, and folding them makes them impossible to grep.
_WIDTH_OFF_TERMINAL = 200
_COLOUR = colour_settings(os.environ)
stdout = Console(soft_wrap=False, **_COLOUR)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=False, width=_WIDTH_OFF_TERMINAL, **_COLOUR)
stderr = Console(stderr=True, **_COLOUR)


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


def resolve_backends(
    cases: list[Case], selected: list[str] | None, from_specs: dict[str, Backend]
) -> dict[str, Backend]:
    """Instantiate every backend the run needs; any unavailable one stops the run (exit 3) before work."""
    names = list(dict.fromkeys(n for c in cases for n in backends_for(c, selected, list(from_specs))))
    backends = {name: from_specs.get(name) or get_backend(name) for name in names}
    unavailable = []
    for name, backend in backends.items():
        status = backend.availability()
        if not status.ok:
            unavailable.append(f"{name}: unavailable: {status.detail}")
    if unavailable:
        raise BackendUnavailable("\n".join(unavailable))
    return backends


def plugin_backends(specs: tuple[str, ...]) -> dict[str, Backend]:
    """The `--backend module:attr` backends, by name."""
    return {b.name: b for b in (load_backend_spec(s) for s in specs)}


def judged_as(cases: list[Case], plugins: dict[str, Backend], template: str | None) -> list[Case]:
    """Give each plug-in the bounds of `template` (e.g. --as cuda-emu); without one, a plug-in that no bound
    of a case names would run unjudged, so that is refused."""
    if template is None:
        for name in plugins:
            if not any(
                b.candidate in (name, ANY_BACKEND) or b.against == name for c in cases for b in c.parity
            ):
                raise InputError(
                    f"backend {name!r} is named by no parity bound of the selected cases, so nothing would"
                    " judge it: pass --as BACKEND to judge it with that backend's bounds",
                    path="--backend",
                )
        return cases
    out = []
    for case in cases:
        cloned = [
            dataclasses.replace(b, candidate=name)
            for b in case.parity
            if b.candidate == template
            for name in plugins
        ]
        if plugins and not cloned:
            raise InputError(f"case {case.id} has no bound with candidate {template!r} to copy", path="--as")
        out.append(dataclasses.replace(case, parity=case.parity + tuple(cloned)))
    return out

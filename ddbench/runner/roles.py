"""Who judges whom: a backend that runs must be a candidate some bound judges, or a declared reference.

A backend no bound judges would run and "pass" while nothing looked at its output: the false green this
module exists to rule out. The suite declares its references (the `against` side of its bounds); the user
may declare more (`--reference-only`) or lend a candidate's bounds to new backends (`--as`). Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from enum import Enum

from ddbench.errors import InputError
from ddbench.suite.model import ANY_BACKEND, Case


class Role(str, Enum):
    CANDIDATE = "candidate"  # some bound of the case judges its output
    REFERENCE = "reference"  # the truth side of a bound, or declared reference-only by the user
    UNJUDGED = "unjudged"  # nothing would look at its output in this case: it is not run there


def role_in(case: Case, name: str, reference_only: Iterable[str] = ()) -> Role:
    if any(bound.applies_to(name) for bound in case.parity):
        return Role.CANDIDATE
    if name in reference_only or any(bound.against == name for bound in case.parity):
        return Role.REFERENCE
    return Role.UNJUDGED


def default_backends(case: Case) -> list[str]:
    """What a case runs unless told otherwise: its own `backends`, else every backend its bounds name."""
    if case.backends:
        return list(case.backends)
    return list(dict.fromkeys(n for b in case.parity for n in (b.against, b.candidate) if n != ANY_BACKEND))


def candidates_of(cases: Sequence[Case]) -> list[str]:
    """The candidates the bounds of these cases judge (for messages: what `--as` could borrow)."""
    return sorted({b.candidate for c in cases for b in c.parity})


def lend_bounds(cases: Sequence[Case], names: Sequence[str], template: str) -> list[Case]:
    """`--as TEMPLATE`: each of `names` gets a copy of every bound whose candidate is `template`."""
    out = []
    for case in cases:
        borrowed = [
            dataclasses.replace(b, candidate=name)
            for b in case.parity
            if b.candidate == template
            for name in names
        ]
        out.append(dataclasses.replace(case, parity=case.parity + tuple(borrowed)))
    if names and not any(b.candidate == template for c in cases for b in c.parity):
        raise InputError(
            f"no selected case has a bound with candidate {template!r} to lend; candidates: "
            + (", ".join(candidates_of(cases)) or "none"),
            path="--as",
        )
    return out


def refuse_unjudged(
    cases: Sequence[Case], wanted: dict[str, list[str]], reference_only: Sequence[str]
) -> None:
    """`wanted`: case ID -> the backends asked to run there. A backend that is neither judged nor a reference
    on ANY case where it was asked is refused before any work (exit 2): it would only ever run unjudged."""
    by_id = {c.id: c for c in cases}
    asked: dict[str, list[Case]] = {}
    for case_id, names in wanted.items():
        for name in names:
            asked.setdefault(name, []).append(by_id[case_id])
    refused = [
        name
        for name, where in asked.items()
        if all(role_in(c, name, reference_only) is Role.UNJUDGED for c in where)
    ]
    if refused:
        raise InputError(
            f"backend(s) {', '.join(refused)}: no parity bound of the selected cases judges them, so they"
            " would run and nothing would look at their output. Bounds exist for: "
            f"{', '.join(candidates_of(cases))}."
            " Pass --as BACKEND to judge them with that backend's bounds, or --reference-only NAME if they"
            " are only a truth to compare others against",
            path="--backends",
        )

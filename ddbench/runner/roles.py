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


def roles_in(case: Case, names: Sequence[str], reference_only: Iterable[str] = ()) -> dict[str, Role]:
    """The role of each backend asked to run in this case, given the others that run beside it.

    A candidate needs a bound that applies to it AND whose `against` runs too (a bound whose truth is not
    run judges nothing); a reference needs a running candidate compared against it, or the user's word.
    Dropping one backend can orphan another, so this repeats until nothing changes."""
    declared = set(reference_only)
    running = set(names)
    while True:
        roles = {n: _role(case, n, running, declared) if n in running else Role.UNJUDGED for n in names}
        still = {n for n, role in roles.items() if role is not Role.UNJUDGED}
        if still == running:
            return roles
        running = still


def _role(case: Case, name: str, running: set[str], declared: set[str]) -> Role:
    if any(bound.applies_to(name) and bound.against in running for bound in case.parity):
        return Role.CANDIDATE
    compared = any(
        bound.against == name and any(bound.applies_to(other) for other in running if other != name)
        for bound in case.parity
    )
    return Role.REFERENCE if compared or name in declared else Role.UNJUDGED


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
    if not any(b.candidate == template for c in cases for b in c.parity):
        raise InputError(
            f"no selected case has a bound with candidate {template!r} to lend; candidates: "
            + (", ".join(candidates_of(cases)) or "none"),
            path="--as",
        )
    return out


def refuse_unjudged(cases: Sequence[Case], roles: dict[str, dict[str, Role]]) -> None:
    """`roles`: case ID -> backend -> its role there. A backend that is neither judged nor a reference on
    ANY case where it was asked is refused before any work (exit 2): it would only ever run unjudged."""
    asked: dict[str, list[Role]] = {}
    for by_name in roles.values():
        for name, role in by_name.items():
            asked.setdefault(name, []).append(role)
    refused = [name for name, found in asked.items() if all(r is Role.UNJUDGED for r in found)]
    if refused:
        raise InputError(
            f"backend(s) {', '.join(refused)}: no parity bound of the selected cases judges them, so they"
            " would run and nothing would look at their output. Bounds exist for: "
            f"{', '.join(candidates_of(cases))}."
            " Judge them with a candidate's bounds (--as BACKEND; --ddbench-as under pytest), or declare them"
            " a truth to compare others against (--reference-only; --ddbench-reference-only)",
            path="--backends",
        )

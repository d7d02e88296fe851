"""What a tree kind is to a suite: its fields, its size, its tree and its name in case IDs, declared once.

Each generator module declares its kind next to the generator (`KIND`; shapes.py one constant per shape);
`ddbench.trees.TREE_KINDS` lists them, and tests/test_vocabulary.py checks the suite schema's tree branches
against the declarations. Adding a kind is its declaration, its line in TREE_KINDS and its schema branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddbench.errors import TreeSpecError
from ddbench.trees.tree import Tree

Fields = Mapping[str, Any]


@dataclass(frozen=True)
class TreeKind:
    name: str
    required: tuple[str, ...]
    q_len: Callable[[Fields], int]  # checks the parameters, builds nothing
    build: Callable[[Fields, int], Tree]  # (fields, seed): the seed matters to the synthetic kinds only
    label: Callable[[Fields], str]  # short name in case IDs: ddtree-b8, chain16
    optional: tuple[str, ...] = ()  # read only when given and not null: the generator's defaults apply


def given(fields: Fields, *names: str) -> dict[str, Any]:
    """The optional fields the spec sets, so the generator's own defaults apply to the rest."""
    return {name: fields[name] for name in names if name in fields}


def options_label(fields: Fields, tags: tuple[tuple[str, str], ...]) -> str:
    """Optional fields the spec sets explicitly, as -L7-k4: labels stay short when defaults are used."""
    return "".join(f"-{tag}{fields[name]}" for name, tag in tags if name in fields)


def count(value: object, field: str, least: int = 0) -> int:
    """Length of an explicit list, without looking inside it."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise TreeSpecError(f"{field} must be a list, got {value!r}", path=field)
    n = len(value)  # type: ignore[arg-type]
    if n < least:
        raise TreeSpecError(f"{field} needs at least {least} entries, got {n}", path=field)
    return n

"""Draft-tree topologies for the verify kernel: what a suite's `tree` spec means.

`build_tree` turns a spec into a Tree, `tree_q_len` sizes it without building (validation, listing),
`tree_label` names it in case IDs. Every bad spec raises TreeSpecError with the field relative to the spec.

The eagle/ddtree/medusa generators are deliberately not re-exported: the functions would shadow their
modules (ddbench.trees.eagle would become the function). Import them from ddbench.trees.eagle etc.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ddbench.errors import TreeSpecError
from ddbench.trees._validate import check_q_len
from ddbench.trees.ddtree import ddtree as _ddtree
from ddbench.trees.ddtree import ddtree_q_len
from ddbench.trees.eagle import eagle as _eagle
from ddbench.trees.eagle import eagle_q_len
from ddbench.trees.medusa import medusa as _medusa
from ddbench.trees.medusa import medusa_q_len
from ddbench.trees.shapes import (
    chain,
    chain_q_len,
    from_parents,
    from_paths,
    kary,
    kary_q_len,
    star,
    star_q_len,
)
from ddbench.trees.tree import MAX_Q_LEN, Tree

__all__ = [
    "KINDS",
    "MAX_Q_LEN",
    "Tree",
    "build_tree",
    "chain",
    "from_parents",
    "from_paths",
    "kary",
    "star",
    "tree_label",
    "tree_q_len",
]

_REQUIRED: dict[str, tuple[str, ...]] = {
    "chain": ("length",),
    "star": ("size",),
    "kary": ("branching", "depth"),
    "eagle": ("steps", "topk", "num_draft_tokens"),
    "ddtree": ("budget",),
    "medusa": ("nodes",),
    "paths": ("paths",),
    "parents": ("parents",),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {"ddtree": ("depth_limit", "topk"), "medusa": ("depth", "topk")}

KINDS = tuple(_REQUIRED)


def _fields(spec: object) -> tuple[str, dict[str, Any]]:
    """The kind and the fields it reads (required ones checked present; optional ones only if not null)."""
    if not isinstance(spec, Mapping):
        raise TreeSpecError(f'a tree spec must be an object with a "kind", got {spec!r}')
    if "kind" not in spec:
        raise TreeSpecError(f'missing field "kind" (one of {", ".join(KINDS)})', path="kind")
    kind = spec["kind"]
    if not isinstance(kind, str) or kind not in _REQUIRED:
        raise TreeSpecError(f"unknown tree kind {kind!r}; expected one of {', '.join(KINDS)}", path="kind")
    fields: dict[str, Any] = {}
    for name in _REQUIRED[kind]:
        if name not in spec:
            raise TreeSpecError(f'a {kind} tree needs the field "{name}"', path=name)
        fields[name] = spec[name]
    for name in _OPTIONAL.get(kind, ()):
        if spec.get(name) is not None:
            fields[name] = spec[name]
    return kind, fields


def _count(value: object, field: str, least: int = 0) -> int:
    """Length of an explicit list, without looking inside it."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise TreeSpecError(f"{field} must be a list, got {value!r}", path=field)
    count = len(value)  # type: ignore[arg-type]
    if count < least:
        raise TreeSpecError(f"{field} needs at least {least} entries, got {count}", path=field)
    return count


def _given(fields: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """The optional fields the spec sets, so the generator's own defaults apply to the rest."""
    return {name: fields[name] for name in names if name in fields}


_Q_LEN: dict[str, Callable[[dict[str, Any]], int]] = {
    "chain": lambda f: chain_q_len(f["length"]),
    "star": lambda f: star_q_len(f["size"]),
    "kary": lambda f: kary_q_len(f["branching"], f["depth"]),
    "eagle": lambda f: eagle_q_len(f["steps"], f["topk"], f["num_draft_tokens"]),
    "ddtree": lambda f: ddtree_q_len(f["budget"], **_given(f, "depth_limit", "topk")),
    "medusa": lambda f: medusa_q_len(f["nodes"], **_given(f, "depth", "topk")),
    "paths": lambda f: check_q_len(_count(f["paths"], "paths") + 1, "paths", MAX_Q_LEN, "paths + root"),
    "parents": lambda f: check_q_len(_count(f["parents"], "parents", 1), "parents", MAX_Q_LEN, "parents"),
}

_BUILD: dict[str, Callable[[dict[str, Any], int], Tree]] = {
    "chain": lambda f, _: chain(f["length"]),
    "star": lambda f, _: star(f["size"]),
    "kary": lambda f, _: kary(f["branching"], f["depth"]),
    "eagle": lambda f, seed: _eagle(f["steps"], f["topk"], f["num_draft_tokens"], seed=seed),
    "ddtree": lambda f, seed: _ddtree(f["budget"], **_given(f, "depth_limit", "topk"), seed=seed),
    "medusa": lambda f, seed: _medusa(f["nodes"], **_given(f, "depth", "topk"), seed=seed),
    "paths": lambda f, _: from_paths(f["paths"]),
    "parents": lambda f, _: from_parents(f["parents"]),
}


def build_tree(spec: Mapping[str, Any], seed: int) -> Tree:
    """The tree a spec describes; `seed` only matters for the synthetic kinds (eagle, ddtree, medusa)."""
    kind, fields = _fields(spec)
    return _BUILD[kind](fields, seed)


def tree_q_len(spec: Mapping[str, Any]) -> int:
    """q_len of the spec's tree, parameters checked but nothing built (explicit lists are only counted)."""
    kind, fields = _fields(spec)
    return _Q_LEN[kind](fields)


def _options(fields: Mapping[str, Any], tags: tuple[tuple[str, str], ...]) -> str:
    """Optional fields the spec sets explicitly, as -L7-k4: labels stay short when defaults are used."""
    return "".join(f"-{tag}{fields[name]}" for name, tag in tags if name in fields)


RAGGED_LABEL_CHARS = 40  # per-request labels joined longer than this are summarised by their q_len range


def tree_label(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    """Short name for case IDs: the kind and the spec's numbers (chain16, ddtree-b8, eagle-5-4-8, ...);
    per-request trees join their distinct labels (ddtree-b8+chain3), or say `ragged-q2-17` when long."""
    if not isinstance(spec, Mapping):
        labels = list(dict.fromkeys(tree_label(s) for s in spec))
        joined = "+".join(labels)
        if len(joined) <= RAGGED_LABEL_CHARS:
            return joined
        q_lens = [tree_q_len(s) for s in spec]
        return f"ragged-q{min(q_lens)}-{max(q_lens)}"
    kind, f = _fields(spec)
    if kind == "chain":
        return f"chain{f['length']}"
    if kind == "star":
        return f"star{f['size']}"
    if kind == "kary":
        return f"kary-{f['branching']}x{f['depth']}"
    if kind == "eagle":
        return f"eagle-{f['steps']}-{f['topk']}-{f['num_draft_tokens']}"
    if kind == "ddtree":
        return f"ddtree-b{f['budget']}" + _options(f, (("depth_limit", "L"), ("topk", "k")))
    if kind == "medusa":
        return f"medusa-{f['nodes']}" + _options(f, (("depth", "d"), ("topk", "k")))
    return f"{kind}-{_count(f[kind], kind)}"

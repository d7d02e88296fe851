"""Draft-tree topologies for the verify kernel: what a suite's `tree` spec means.

`build_tree` turns a spec into a Tree, `tree_q_len` sizes it without building (validation, listing),
`tree_label` names it in case IDs. Every bad spec raises TreeSpecError with the field relative to the spec.

The eagle/ddtree/medusa generators are deliberately not re-exported: the functions would shadow their
modules (ddbench.trees.eagle would become the function). Import them from ddbench.trees.eagle etc.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddbench.errors import TreeSpecError
from ddbench.trees import ddtree as _ddtree_module
from ddbench.trees import eagle as _eagle_module
from ddbench.trees import medusa as _medusa_module
from ddbench.trees import shapes as _shapes_module
from ddbench.trees.kind import TreeKind
from ddbench.trees.shapes import chain, from_parents, from_paths, kary, star
from ddbench.trees.tree import MAX_Q_LEN, Tree

__all__ = [
    "KINDS",
    "MAX_Q_LEN",
    "TREE_KINDS",
    "Tree",
    "TreeKind",
    "build_tree",
    "chain",
    "from_parents",
    "from_paths",
    "kary",
    "star",
    "tree_label",
    "tree_q_len",
]

# Every kind, as its generator module declares it: the one place a suite's tree vocabulary comes from.
TREE_KINDS: dict[str, TreeKind] = {
    k.name: k
    for k in (
        _shapes_module.CHAIN,
        _shapes_module.STAR,
        _shapes_module.KARY,
        _eagle_module.KIND,
        _ddtree_module.KIND,
        _medusa_module.KIND,
        _shapes_module.PATHS,
        _shapes_module.PARENTS,
    )
}
KINDS = tuple(TREE_KINDS)


def _fields(spec: object) -> tuple[TreeKind, dict[str, Any]]:
    """The kind and the fields it reads (required ones checked present; optional ones only if not null)."""
    if not isinstance(spec, Mapping):
        raise TreeSpecError(f'a tree spec must be an object with a "kind", got {spec!r}')
    if "kind" not in spec:
        raise TreeSpecError(f'missing field "kind" (one of {", ".join(KINDS)})', path="kind")
    name = spec["kind"]
    if not isinstance(name, str) or name not in TREE_KINDS:
        raise TreeSpecError(f"unknown tree kind {name!r}; expected one of {', '.join(KINDS)}", path="kind")
    kind = TREE_KINDS[name]
    fields: dict[str, Any] = {}
    for field in kind.required:
        if field not in spec:
            raise TreeSpecError(f'a {name} tree needs the field "{field}"', path=field)
        fields[field] = spec[field]
    for field in kind.optional:
        if spec.get(field) is not None:
            fields[field] = spec[field]
    return kind, fields


def build_tree(spec: Mapping[str, Any], seed: int) -> Tree:
    """The tree a spec describes; `seed` only matters for the synthetic kinds (eagle, ddtree, medusa)."""
    kind, fields = _fields(spec)
    return kind.build(fields, seed)


def tree_q_len(spec: Mapping[str, Any]) -> int:
    """q_len of the spec's tree, parameters checked but nothing built (explicit lists are only counted)."""
    kind, fields = _fields(spec)
    return kind.q_len(fields)


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
    kind, fields = _fields(spec)
    return kind.label(fields)

"""One source for the suite vocabulary: the tree kinds the generator modules declare are the kinds, fields
and branches of the suite schema, every limit the metrics judge (tensor and generation) is in the schema
with a description, and every declared kind builds the tree it sizes."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from ddbench.suite.generation import GENERATION_LIMITS
from ddbench.suite.model import LIMIT_NAMES
from ddbench.trees import KINDS, TREE_KINDS, build_tree, tree_label, tree_q_len

SCHEMA = json.loads(resources.files("ddbench.suite").joinpath("schema.json").read_text())
DEFS = SCHEMA["$defs"]
# One small spec per kind: a new kind without one fails test_every_kind_builds_the_tree_it_sizes.
EXAMPLES = {
    "chain": {"length": 4},
    "star": {"size": 5},
    "kary": {"branching": 2, "depth": 2},
    "eagle": {"steps": 3, "topk": 2, "num_draft_tokens": 6},
    "ddtree": {"budget": 8, "topk": 3},
    "medusa": {"nodes": 12, "depth": 3},
    "paths": {"paths": [[0], [1], [0, 0]]},
    "parents": {"parents": [-1, 0, 0, 1]},
}
PAIR_FIELDS = {"candidate", "against", "no_worse_than", "margin_row_ulp"}


def _branches() -> dict[str, str]:
    """kind -> the $defs entry its schema branch refers to."""
    out = {}
    for rule in DEFS["tree"]["allOf"]:
        out[rule["if"]["properties"]["kind"]["const"]] = rule["then"]["$ref"].rsplit("/", 1)[1]
    return out


def test_the_schema_s_kinds_are_the_declared_kinds_in_order():
    assert DEFS["tree"]["properties"]["kind"]["enum"] == list(KINDS)
    assert list(_branches()) == list(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_s_schema_branch_has_the_declared_fields(kind):
    declared = TREE_KINDS[kind]
    branch = DEFS[_branches()[kind]]
    assert set(branch.get("required", [])) == set(declared.required)
    assert set(branch["properties"]) == {"kind", *declared.required, *declared.optional}
    assert branch.get("additionalProperties") is False


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_builds_the_tree_it_sizes(kind):
    spec = {"kind": kind, **EXAMPLES[kind]}
    tree = build_tree(spec, seed=3)
    assert tree.q_len == tree_q_len(spec) and tree_label(spec).startswith(kind)


def test_every_limit_is_in_the_schema_with_a_description():
    properties = DEFS["parity_bound"]["properties"]
    assert set(properties) - PAIR_FIELDS == set(LIMIT_NAMES) | set(GENERATION_LIMITS)
    missing = [name for name, p in properties.items() if not p.get("description")]
    assert missing == []

"""Named bound sets: defined once in ddbench/suite/bound_sets.py, named in a suite's `parity` list, expanded
in place; the schema's list of names is the module's; an unknown name is an error naming the field."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from ddbench.errors import SuiteInvalid
from ddbench.suite import parse_suite
from ddbench.suite.bound_sets import BOUND_SETS


def _suite(parity: list) -> dict:
    case = {"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 5, "tree": {"kind": "chain", "length": 2}}
    return {"name": "sets", "defaults": {"parity": parity}, "cases": [case]}


def test_the_schema_names_exactly_the_shipped_sets():
    schema = json.loads(resources.files("ddbench.suite").joinpath("schema.json").read_text())
    (named,) = [s for s in schema["$defs"]["parity"]["items"]["oneOf"] if "enum" in s]
    assert named["enum"] == list(BOUND_SETS)


def test_a_set_name_expands_in_place_between_inline_bounds():
    inline = {"candidate": "triton", "against": "reference", "max_row_ulp": 3.0}
    case = parse_suite(_suite([inline, "cuda-emu", "candidate"]), "sets.json").cases[0]
    pairs = [(b.candidate, b.against) for b in case.parity]
    assert pairs == [
        ("triton", "reference"),
        ("cuda-emu", "reference-fp64"),
        ("cuda-emu", "triton"),
        ("candidate", "reference-fp64"),
        ("candidate", "triton"),
    ]
    emu = case.parity[1]
    assert emu.limit("max_row_ulp") == 1.5 and emu.limit("abs_gain") == 0.25 and emu.no_worse_than == "triton"


def test_an_unknown_set_is_refused_naming_the_field():
    with pytest.raises(SuiteInvalid) as err:
        parse_suite(_suite(["cuda-emu", "strict"]), "sets.json")
    reasons = [(e.path, e.reason) for e in err.value.errors]
    assert reasons == [
        ("defaults.parity[1]", '"strict" is not one of "triton", "cuda-emu", "cuda", "candidate"')
    ]

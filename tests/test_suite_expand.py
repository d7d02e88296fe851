"""Suite expansion: defaults, entries, matrix points; presets, layouts, seeded prefixes, case IDs, -k."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from ddbench.errors import InputError, SuiteInvalid
from ddbench.inputs.suite_file import load_suite_file
from ddbench.suite import Case, parse_suite
from ddbench.suite.expand import expand_document
from ddbench.suite.presets import find_preset, preset_names
from ddbench.suite.select import case_filter

CHAIN4 = {"kind": "chain", "length": 4}
DDTREE8 = {"kind": "ddtree", "budget": 8}


def suite(*cases: dict[str, Any], defaults: dict[str, Any] | None = None, **top: Any):
    doc: dict[str, Any] = {"name": "t", **top}
    if defaults is not None:
        doc["defaults"] = defaults
    if cases:
        doc["cases"] = list(cases)
    return parse_suite(doc, "t.json")


def one(**fields: Any) -> Case:
    fields.setdefault("model", "kimi-k2.6")
    fields.setdefault("tree", CHAIN4)
    (case,) = suite(fields).cases
    return case


# --- defaults -> entries -> matrix -------------------------------------------------------------------------


LAYERED = {
    "name": "layered",
    "defaults": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8, "dp_attention": 2},
        "inputs": {"logit_spread": 3.0},
        "prefix": 5,
        "batch_size": 4,
        "tags": ["a", "b"],
    },
    "cases": [
        {
            "label": "grid",
            "layout": {"dp_attention": 1},
            "inputs": {"sink_logit": 1.5},
            "tags": ["b", "c"],
            "batch_size": 7,
            "matrix": {"batch_size": [1, 2, 3], "tree": [CHAIN4, DDTREE8]},
        },
        {"label": "single", "prefix": 9, "tree": {"kind": "star", "size": 3}},
    ],
}


def test_matrix_is_a_cartesian_product_in_key_order():
    raws = expand_document(LAYERED)
    assert len(raws) == 3 * 2 + 1
    points = [(r.fields["batch_size"], r.fields["tree"]["kind"]) for r in raws[:6]]
    assert points == [(1, "chain"), (1, "ddtree"), (2, "chain"), (2, "ddtree"), (3, "chain"), (3, "ddtree")]
    s = parse_suite(copy.deepcopy(LAYERED), "layered.json")
    assert len(s.cases) == 7
    assert [c.batch_size for c in s.cases] == [1, 1, 2, 2, 3, 3, 4]


def test_fields_override_level_by_level():
    s = parse_suite(copy.deepcopy(LAYERED), "layered.json")
    grid, single = s.cases[0], s.cases[-1]
    assert grid.batch_size == 1  # matrix beats the entry (7), which beats defaults (4)
    assert single.batch_size == 4  # defaults
    assert grid.prefix_lens == (5,)
    assert single.prefix_lens == (9,) * 4  # entry beats defaults; one value for every request
    assert single.q_len == 3  # star size counts the root


def test_layout_and_inputs_merge_shallowly():
    s = parse_suite(copy.deepcopy(LAYERED), "layered.json")
    grid, single = s.cases[0], s.cases[-1]
    assert (grid.layout.tp, grid.layout.dp_attention) == (8, 1)  # tp from defaults, dp from the entry
    assert (single.layout.tp, single.layout.dp_attention) == (8, 2)
    assert (grid.inputs.logit_spread, grid.inputs.sink_logit) == (3.0, 1.5)
    assert (single.inputs.logit_spread, single.inputs.sink_logit) == (3.0, 4.0)  # 4.0: InputStyle default


def test_matrix_layout_merges_with_the_layers_below():
    doc = {
        "name": "m",
        "defaults": {"model": "kimi-k2.6", "tree": CHAIN4, "layout": {"tp": 8, "dp_attention": 2}},
        "cases": [{"matrix": {"layout": [{"tp": 4}, {"dp_attention": 8}]}}],
    }
    layouts = [(c.layout.tp, c.layout.dp_attention) for c in parse_suite(doc, "m.json").cases]
    assert layouts == [(4, 2), (8, 8)]


def test_tags_are_a_union_without_repeats():
    s = parse_suite(copy.deepcopy(LAYERED), "layered.json")
    assert s.cases[0].tags == ("a", "b", "c")
    assert s.cases[-1].tags == ("a", "b")


def test_other_fields_are_replaced_whole():
    doc = {
        "name": "r",
        "defaults": {
            "model": {"preset": "kimi-k2.6", "heads": 32},
            "tree": {"kind": "ddtree", "budget": 8, "topk": 4},
        },
        "cases": [{"model": "deepseek-v3", "tree": {"kind": "ddtree", "budget": 16}}],
    }
    (case,) = parse_suite(doc, "r.json").cases
    assert case.model.name == "deepseek-v3" and case.model.heads == 128
    assert case.tree == {"kind": "ddtree", "budget": 16}  # no topk carried over from defaults


def test_top_level_matrix_and_cases_both_expand():
    doc = {
        "name": "top",
        "defaults": {"model": "kimi-k2.6"},
        "matrix": {"tree": [CHAIN4, DDTREE8], "seed": [1, 2]},
        "cases": [{"tree": {"kind": "star", "size": 5}}],
    }
    cases = parse_suite(doc, "top.json").cases
    assert [(c.tree["kind"], c.seed) for c in cases] == [
        ("chain", 1),
        ("chain", 2),
        ("ddtree", 1),
        ("ddtree", 2),
        ("star", 0),
    ]
    assert [c.origin for c in cases] == ["(top level)"] * 4 + ["cases[0]"]


def test_field_defaults_when_nothing_sets_them():
    case = one()
    assert (case.batch_size, case.prefix_lens, case.page_size, case.dtype, case.seed) == (
        1,
        (0,),
        1,
        "bfloat16",
        0,
    )
    assert (case.layout.tp, case.layout.dp_attention) == (1, 1)
    assert [(b.candidate, b.against) for b in case.parity] == [("triton", "reference")]
    assert case.budget is None and case.tags == () and case.description == ""


def test_origins_of_each_field():
    doc = copy.deepcopy(LAYERED)
    doc["cases"][0]["matrix"]["prefix"] = [0, 3]
    raws = expand_document(doc)
    first_grid, single = raws[0], raws[-1]
    assert first_grid.origin("batch_size") == "cases[0].matrix.batch_size[0]"
    assert raws[1].origin("tree") == "cases[0].matrix.tree[0]"
    assert raws[1].origin("prefix") == "cases[0].matrix.prefix[1]"
    assert first_grid.origin("model") == "defaults.model"
    assert first_grid.origin("layout") == "cases[0].layout"
    assert first_grid.origin("seed") == "cases[0]"  # set nowhere: the entry
    assert single.origin("prefix") == "cases[1].prefix"
    assert single.origin("batch_size") == "defaults.batch_size"
    assert single.entry == "cases[1]"


def test_error_paths_follow_origins():
    doc = {
        "name": "o",
        "defaults": {"model": "kimi-k2.6", "prefix": [1, 2], "tree": CHAIN4},
        "cases": [
            {"batch_size": 2, "matrix": {"layout": [{"tp": 8}, {"tp": 128}]}},  # 64 heads over 128: bad point
            {"batch_size": 3},  # prefix list of defaults has 2 entries
            {"batch_size": 2, "matrix": {"tree": [CHAIN4, {"kind": "parents", "parents": [-1, 0, 3]}]}},
        ],
    }
    with pytest.raises(SuiteInvalid) as info:
        parse_suite(doc, "o.json")
    got = [(e.path, e.reason) for e in info.value.errors]
    assert [p for p, _ in got] == [
        "cases[0].matrix.layout[1]",
        "defaults.prefix",
        "cases[2].matrix.tree[1].parents[2]",
    ]
    assert "64 heads of kimi-k2.6" in got[0][1] and "128" in got[0][1]
    assert "per-request prefix list has 2 entries but batch_size is 3" in got[1][1]
    assert "parent index 3 of node 2 is out of range" in got[2][1]
    assert all(e.file == "o.json" for e in info.value.errors)


# --- presets and layouts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "heads", "scale"),
    [
        ("kimi-k2.6", 64, 0.144680),
        ("kimi-k2.5", 64, 0.144680),
        ("kimi-k2-0905", 64, 0.144680),
        ("kimi-k2-0711", 64, 0.130861),
        ("deepseek-v3", 128, 0.135234),
        ("deepseek-r1", 128, 0.135234),
    ],
)
def test_preset_scales(name, heads, scale):
    preset = find_preset(name)
    assert preset is not None
    assert preset.heads == heads
    assert round(preset.sm_scale, 6) == scale
    assert abs(preset.sm_scale - 576**-0.5) > 0.08  # not the classic 1/sqrt(576) = 0.0417
    case = one(model=name)
    assert round(case.model.sm_scale, 6) == scale
    assert case.model.heads == heads


def test_preset_names_and_custom_models():
    assert {"kimi-k2.6", "kimi-k2-0711", "deepseek-v3"} <= set(preset_names())
    assert find_preset("llama") is None
    assert one(model="kimi-k2.5").model.name == "kimi-k2.6"  # aliases resolve to the canonical name
    tweaked = one(model={"preset": "kimi-k2.6", "heads": 32})
    assert (tweaked.model.name, tweaked.model.heads) == ("kimi-k2.6-custom", 32)
    assert round(tweaked.model.sm_scale, 6) == 0.144680
    custom = one(model={"heads": 16, "sm_scale": 0.125})
    assert (custom.model.name, custom.model.heads, custom.model.sm_scale) == ("custom", 16, 0.125)
    assert one(model={"preset": "deepseek-v3"}).model.name == "deepseek-v3"


@pytest.mark.parametrize(
    ("model", "layout", "per_rank"),
    [
        ("kimi-k2.6", {"tp": 8}, 8),
        ("kimi-k2.6", {"tp": 4}, 16),
        ("kimi-k2.6", {"tp": 1}, 64),
        ("deepseek-v3", {"tp": 8}, 16),
        ("deepseek-v3", {"tp": 8, "dp_attention": 8}, 128),  # DP-attention: every rank holds every head
        ("kimi-k2.6", {"tp": 8, "dp_attention": 8}, 64),
        ("kimi-k2.6", {"tp": 8, "dp_attention": 2}, 16),  # attention TP 4
    ],
)
def test_heads_per_rank(model, layout, per_rank):
    case = one(model=model, layout=layout)
    assert case.heads_per_rank == per_rank
    assert f"-h{per_rank}-" in case.id


# --- seeded prefix ranges ----------------------------------------------------------------------------------


def test_prefix_range_is_seeded_and_within_bounds():
    draws = {}
    for seed in range(6):
        a = one(batch_size=32, prefix={"min": 10, "max": 500}, seed=seed)
        b = one(batch_size=32, prefix={"min": 10, "max": 500}, seed=seed)
        assert a.prefix_lens == b.prefix_lens
        assert len(a.prefix_lens) == 32
        assert all(10 <= p <= 500 for p in a.prefix_lens)
        assert len(set(a.prefix_lens)) > 1
        draws[seed] = a.prefix_lens
    assert len(set(draws.values())) == len(draws)  # fresh lengths per seed


def test_prefix_range_draws_are_pinned():
    # The draws are part of the workload (and its hash): changing how they are made changes every ID.
    case = one(batch_size=6, prefix={"min": 10, "max": 500}, seed=3, tree=DDTREE8)
    assert case.prefix_lens == (473, 235, 476, 199, 48, 494)
    assert case.id == "kimi-k2.6-tp1-h64-bs6-p48-494-ddtree-b8-759fe5a9"


def test_prefix_range_of_a_single_value():
    assert one(batch_size=3, prefix={"min": 7, "max": 7}).prefix_lens == (7, 7, 7)


# --- case IDs ----------------------------------------------------------------------------------------------


def test_case_id_is_pinned():
    assert one().id == "kimi-k2.6-tp1-h64-bs1-p0-chain4-3537c9e4"
    case = one(
        label="lbl",
        model="deepseek-v3",
        layout={"tp": 8, "dp_attention": 2},
        batch_size=2,
        prefix=[3, 9],
        page_size=16,
        tree={"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 6},
    )
    assert case.id.startswith("lbl.deepseek-v3-tp8dp2-h32-bs2-p3-9-eagle-3-2-6-ps16-")
    assert len(case.id.rsplit("-", 1)[1]) == 8


def test_case_ids_are_stable_across_processes():
    """The hash must not depend on the interpreter (e.g. PYTHONHASHSEED)."""
    doc = json.dumps(LAYERED)
    code = (
        "import json,sys; from ddbench.suite import parse_suite; "
        "print('\\n'.join(c.id for c in parse_suite(json.loads(sys.argv[1]), 'x').cases))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, doc], capture_output=True, text=True, env=env, check=True
    )
    here = [c.id for c in parse_suite(copy.deepcopy(LAYERED), "x").cases]
    assert out.stdout.split() == here


def test_same_suite_same_ids():
    first = [c.id for c in parse_suite(copy.deepcopy(LAYERED), "a.json").cases]
    second = [c.id for c in parse_suite(copy.deepcopy(LAYERED), "b.json").cases]
    assert first == second
    assert len(set(first)) == len(first)


def _hash(case: Case) -> str:
    return case.id.rsplit("-", 1)[1]


BASE_FIELDS: dict[str, Any] = {
    "model": "kimi-k2.6",
    "layout": {"tp": 8},
    "batch_size": 2,
    "prefix": 10,
    "tree": DDTREE8,
    "seed": 1,
}


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 2},
        {"prefix": 11},
        {"prefix": [10, 11]},
        {"batch_size": 3},
        {"tree": {"kind": "ddtree", "budget": 9}},
        {"tree": {"kind": "ddtree", "budget": 8, "topk": 4}},
        {"page_size": 16},
        {"layout": {"tp": 4}},
        {"layout": {"tp": 8, "dp_attention": 8}},
        {"model": "deepseek-v3"},
        {"model": "kimi-k2-0711"},  # same heads, different scale
        {"model": {"preset": "kimi-k2.6", "sm_scale": 0.1}},
        {"inputs": {"logit_spread": 1.0}},
        {"inputs": {"sink_logit": 0.0}},
    ],
    ids=lambda c: json.dumps(c, separators=(",", ":")),
)
def test_workload_changes_change_the_hash(change):
    base = one(**BASE_FIELDS)
    changed = one(**{**BASE_FIELDS, **change})
    assert _hash(changed) != _hash(base)
    assert changed.id != base.id


@pytest.mark.parametrize(
    "change",
    [
        {"tags": ["nightly"]},
        {"parity": [{"candidate": "mine", "against": "reference", "max_abs": 0.1}]},
        {"description": "words"},
        {"budget": {"ceiling_us": {"cuda": 10}}},
        {"inputs": {"logit_spread": 2.5, "sink_logit": 4.0}},  # the defaults, spelled out
        {"model": {"preset": "kimi-k2.6"}},
    ],
    ids=lambda c: next(iter(c)),
)
def test_non_workload_changes_keep_the_id(change):
    assert one(**{**BASE_FIELDS, **change}).id == one(**BASE_FIELDS).id


def test_label_changes_the_readable_part_only():
    base, labelled = one(**BASE_FIELDS), one(**BASE_FIELDS, label="mine")
    assert labelled.id == f"mine.{base.id}"
    assert _hash(labelled) == _hash(base)


def test_ids_unique_across_a_big_matrix():
    doc = {
        "name": "big",
        "defaults": {"model": "kimi-k2.6"},
        "matrix": {
            "layout": [{"tp": 8}, {"tp": 4}, {"tp": 8, "dp_attention": 8}],
            "batch_size": [1, 3],
            "prefix": [0, 17, {"min": 1, "max": 99}],
            "tree": [CHAIN4, DDTREE8, {"kind": "star", "size": 4}],
            "seed": [0, 1],
        },
    }
    cases = parse_suite(doc, "big.json").cases
    assert len(cases) == 3 * 2 * 3 * 3 * 2
    assert len({c.id for c in cases}) == len(cases)
    assert len({_hash(c) for c in cases}) == len(cases)


# --- -k filters --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filter_cases() -> list[Case]:
    doc = {
        "name": "k",
        "defaults": {"model": "kimi-k2.6", "layout": {"tp": 8}, "tags": ["cpu"]},
        "cases": [
            {"label": "one", "tree": CHAIN4, "tags": ["smoke"]},
            {"label": "two", "tree": DDTREE8, "tags": ["smoke", "Slow"]},
            {"label": "three", "model": "deepseek-v3", "tree": DDTREE8},
            {
                "label": "four",
                "model": "deepseek-v3",
                "tree": {"kind": "star", "size": 3},
                "tags": ["nightly"],
            },
        ],
    }
    return list(parse_suite(doc, "k.json").cases)


def _labels(cases: list[Case], expression: str | None) -> list[str]:
    keep = case_filter(expression)
    return [c.id.split(".", 1)[0] for c in cases if keep(c)]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (None, ["one", "two", "three", "four"]),
        ("", ["one", "two", "three", "four"]),
        ("   ", ["one", "two", "three", "four"]),
        ("smoke", ["one", "two"]),
        ("slow", ["two"]),  # tags match case-insensitively
        ("SMOKE", ["one", "two"]),
        ("ddtree", ["two", "three"]),  # an ID substring
        ("DeepSeek", ["three", "four"]),
        ("h16", ["three", "four"]),
        ("chain4", ["one"]),
        ("smoke and ddtree", ["two"]),
        ("smoke or nightly", ["one", "two", "four"]),
        ("not smoke", ["three", "four"]),
        ("not not smoke", ["one", "two"]),
        ("cpu and not ddtree", ["one", "four"]),
        ("nightly or smoke and ddtree", ["two", "four"]),  # and binds tighter than or
        ("(nightly or smoke) and ddtree", ["two"]),
        ("((smoke)) and (not (chain4 or slow))", []),
        ("not (smoke or nightly)", ["three"]),
        ("deepseek and (star3 or ddtree)", ["three", "four"]),
        ("missing", []),
        ("smok", []),  # a tag matches whole; only IDs match by substring
    ],
)
def test_filter_expressions(filter_cases, expression, expected):
    assert _labels(filter_cases, expression) == expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("smoke and", "unexpected end"),
        ("and smoke", "unexpected 'and'"),
        ("smoke or or slow", "unexpected 'or'"),
        ("(smoke", "unexpected end"),
        ("smoke)", "unexpected ')'"),
        ("()", "unexpected ')'"),
        ("smoke slow", "unexpected 'slow'"),
        ("not", "unexpected end"),
        ("(smoke slow)", "missing )"),
    ],
)
def test_malformed_filters(expression, reason):
    with pytest.raises(InputError) as info:
        case_filter(expression)
    assert info.value.path == "-k"
    assert reason in info.value.reason
    assert repr(expression) in info.value.message


def test_load_suite_from_a_file(tmp_path):
    file = tmp_path / "layered.json"
    file.write_text(json.dumps(LAYERED))
    s = load_suite_file(file)
    assert (s.name, s.path, len(s.cases)) == ("layered", str(file), 7)
    assert all(c.suite == "layered" for c in s.cases)
    assert [c.id for c in s.cases] == [c.id for c in parse_suite(copy.deepcopy(LAYERED), "x").cases]

"""Ragged q_len: a case may give one tree per request. The requests then have their own draft counts in the
inputs, the IDs, the recorded case, the floor and the Triton model; a list of the wrong length or a bad
spec inside it is an error naming the list entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.errors import SuiteInvalid
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.suite_file import load_suite_file
from ddbench.model.floor import CaseShape
from ddbench.model.triton_model import triton_blocks, triton_counters
from ddbench.suite import parse_suite
from ddbench.suite.from_json import case_from_json
from ddbench.suite.ids import workload_hash

ROOT = Path(__file__).resolve().parent.parent

TREES = [{"kind": "chain", "length": 1}, {"kind": "ddtree", "budget": 32}, {"kind": "star", "size": 5}]


def _suite(**case) -> dict:
    entry = {"model": {"heads": 4, "sm_scale": 0.1}, "batch_size": 3, "prefix": [7, 60, 0], "tree": TREES}
    return {"name": "ragged", "cases": [entry | case]}


def _case(**case):
    return parse_suite(_suite(**case), "ragged.json").cases[0]


def test_one_tree_per_request_gives_each_request_its_q_len():
    case = _case()
    assert case.q_lens == (1, 33, 5) and case.q_len == 33 and case.total_q == 39 and case.ragged_q
    assert "-chain1+ddtree-b32+star5-" in case.id
    x = generate_inputs(case)
    check_inputs(x)
    assert x.qo_indptr.tolist() == [0, 1, 34, 39] and x.max_len_extend == 33
    assert x.q_lens == (1, 33, 5) and [t.q_len for t in x.trees] == [1, 33, 5]
    assert x.mask_indptr.tolist() == [0, 1 * 8, 8 + 33 * 93, 8 + 33 * 93 + 5 * 5]
    assert x.out_cache_loc.numel() == 39 and x.kv_indices.numel() == 67


def test_a_uniform_case_keeps_its_id_and_q_lens_default_to_q_len():
    """The IDs of uniform cases did not move: the committed model baselines of smoke still key every one."""
    smoke = load_suite_file(str(ROOT / "suites" / "smoke.json"))
    stored = json.loads((ROOT / "baselines" / "model-rtx-pro-6000" / "smoke.json").read_text())["cases"]
    uniform = [c for c in smoke.cases if not c.ragged_q and c.sglang_buffers is None]
    assert len(uniform) == 16 and all(c.id in stored for c in uniform)
    assert all(c.q_lens == (c.q_len,) * c.batch_size and "q_lens" not in c.workload() for c in uniform)


def test_the_recorded_case_round_trips_with_its_q_lens():
    case = _case()
    again = case_from_json(json.loads(json.dumps(case.to_json())))  # refuses a workload that rehashes apart
    assert again.q_lens == case.q_lens and again.tree == TREES
    assert workload_hash(again) == case.id.rsplit("-", 1)[1]


def test_a_tree_list_of_the_wrong_length_is_refused():
    with pytest.raises(SuiteInvalid) as err:
        _case(batch_size=2, prefix=[7, 60])
    (problem,) = err.value.errors
    assert problem.path == "cases[0].tree" and "3 entries but batch_size is 2" in problem.reason


def test_a_bad_spec_in_the_list_names_its_entry():
    with pytest.raises(SuiteInvalid) as err:
        _case(tree=[TREES[0], {"kind": "eagle", "steps": 2, "topk": 2, "num_draft_tokens": 20}, TREES[2]])
    (problem,) = err.value.errors
    assert problem.path == "cases[0].tree[1].num_draft_tokens", problem


def test_the_cli_refuses_a_bad_list_with_exit_2(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_suite(tree=[TREES[0], {"kind": "chain"}, TREES[2]])))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "cases[0].tree[1]" in result.output and "Traceback" not in result.output


def test_the_floor_counts_each_request_with_its_own_q_len():
    shape = CaseShape((100, 0), 9, 8, q_lens=(9, 2))
    uniform = CaseShape((100, 0), 9, 8)
    assert shape.keys == (109, 2) and uniform.keys == (109, 9)
    assert shape.flops == 2176 * 8 * (9 * 109 + 2 * 2)
    assert shape.kv_bytes == (109 + 2) * 1152 and shape.q_and_out_bytes == 11 * 8 * (1152 + 1024)


def test_the_triton_model_lets_a_short_request_s_extra_row_blocks_return_at_once():
    """SGLang's grid is sized by the longest q_len: a 1-token request's two other row blocks do nothing."""
    doc = triton_counters(CaseShape((64, 64), 65, 2, q_lens=(65, 1)), triton_blocks("sm_120"))
    assert doc.grid == (2, 2, 3)
    by_count = sorted((s.count, len(s.phases)) for s in doc.cta_shapes)
    # request 1: 2 prefix tiles and 1 draft tile; idle (its offsets, then it returns); request 0: 2 prefix
    # tiles, 3 draft tiles (3 blocks)
    assert by_count == [(2, 1 + 5 * 3), (2, 1 + 5 * 5), (4, 1), (4, 1 + 5 * 5)]


def test_one_spec_repeated_per_request_is_the_workload_of_the_single_spec():
    same = _case(tree=[TREES[1]] * 3)
    single = _case(tree=TREES[1])
    assert same.id == single.id and same.tree == TREES[1] and not same.ragged_q


def test_the_results_report_s_bandwidth_floor_counts_each_request_s_q_len():
    from ddbench.report.bandwidth import bytes_read

    recorded = _case(prefix=[40, 7, 0]).to_json()
    shape = CaseShape((40, 7, 0), 33, 4, q_lens=(1, 33, 5))
    assert bytes_read(recorded) == shape.compulsory_bytes
    older = {k: v for k, v in recorded.items() if k != "q_lens"}  # a file from before ragged q_len
    assert bytes_read(older) == CaseShape((40, 7, 0), 33, 4).compulsory_bytes

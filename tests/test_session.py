"""The Session, the one run path: nothing runs unjudged, whole-word selection, verdicts that cannot lie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.results.document import run_verdict
from ddbench.results.merge import merge_results
from ddbench.runner import Session, SessionOptions
from ddbench.runner.roles import Role, role_in
from ddbench.suite import parse_suite
from ddbench.suite.select import case_filter

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "suites" / "smoke.json")

WRONG = """
import torch
from ddbench.backends import Availability


class Ones:
    name = "ones"

    def availability(self):
        return Availability.yes("test")

    def run(self, inputs):
        inputs.o_extend.fill_(1.0)
        return inputs.o_extend
"""


def _suite(tmp_path: Path, parity: list[dict], **defaults: object) -> str:
    document = {
        "name": "session",
        "defaults": {
            "model": "kimi-k2.6",
            "layout": {"tp": 8},
            "tree": {"kind": "chain", "length": 2},
            "parity": parity,
            **defaults,
        },
        "cases": [{"label": "one", "prefix": 5}, {"label": "two", "prefix": 9}],
    }
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(document))
    return str(path)


def _run(*args: str):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


FP64 = {"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 1.5}


def test_a_known_wrong_kernel_in_backends_is_refused_not_passed():
    """The false green: a mutant named in --backends used to run unjudged while the run said "2 passed"."""
    result = _run(
        "run",
        SMOKE,
        "-k",
        "ragged or paged",
        "--backends",
        "reference,reference-fp64,triton,mutant-emu:mask-stride",
    )
    assert result.exit_code == 2
    assert "mutant-emu:mask-stride" in result.stderr and "no parity bound" in result.stderr
    assert "Bounds exist for: cuda, cuda-emu, triton" in result.stderr
    assert "passed" not in result.stdout


def test_with_as_the_same_kernel_is_judged_and_fails():
    result = _run(
        "run",
        SMOKE,
        "-k",
        "ragged",
        "--backends",
        "reference,reference-fp64,triton,mutant-emu:mask-stride",
        "--as",
        "cuda-emu",
    )
    assert result.exit_code == 1
    assert result.stdout.strip().splitlines()[-1].startswith("failed: 0 passed, 1 failed")


def test_a_plugin_no_bound_names_is_refused_even_inside_backends(tmp_path, monkeypatch):
    (tmp_path / "wrongkern.py").write_text(WRONG)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = _suite(tmp_path, [FP64])
    result = _run("run", suite, "--backends", "reference,reference-fp64,wrongkern:Ones")
    assert result.exit_code == 2 and "ones" in result.stderr and "--as BACKEND" in result.stderr
    judged = _run("run", suite, "--backends", "reference,reference-fp64,wrongkern:Ones", "--as", "reference")
    assert judged.exit_code == 1 and "2 failed" in judged.stdout


def test_reference_only_is_the_explicit_way_to_run_an_unbounded_truth(tmp_path):
    suite = _suite(tmp_path, [{"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 1.5}])
    refused = _run("run", suite, "--backends", "reference,reference-fp64,triton")
    assert refused.exit_code == 2 and "triton" in refused.stderr
    allowed = _run(
        "run", suite, "--backends", "reference,reference-fp64,triton", "--reference-only", "triton"
    )
    assert allowed.exit_code == 0, allowed.output


def test_a_backend_judged_on_some_cases_is_not_run_on_the_others(tmp_path):
    document = json.loads(Path(_suite(tmp_path, [FP64])).read_text())
    triton_bound = {"candidate": "triton", "against": "reference-fp64", "max_row_ulp": 3.0}
    document["cases"][1]["parity"] = [FP64, triton_bound]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(document))
    session = Session(SessionOptions(suites=(str(path),), backends=("reference", "reference-fp64", "triton")))
    one, two = session.cases
    assert session.plan[one.id] == ["reference", "reference-fp64"]
    assert session.plan[two.id] == ["reference", "reference-fp64", "triton"]
    assert session.not_run == {"triton": 1}
    assert "not run where no bound judges them: triton on 1 case(s)" in session.describe()


def test_roles():
    case = parse_suite(
        {
            "name": "r",
            "cases": [
                {
                    "model": "kimi-k2.6",
                    "layout": {"tp": 8},
                    "prefix": 3,
                    "tree": {"kind": "chain", "length": 2},
                }
            ],
            "defaults": {"parity": [FP64]},
        },
        "t",
    ).cases[0]
    assert role_in(case, "reference") is Role.CANDIDATE
    assert role_in(case, "reference-fp64") is Role.REFERENCE
    assert role_in(case, "triton") is Role.UNJUDGED
    assert role_in(case, "triton", reference_only=["triton"]) is Role.REFERENCE


def test_a_run_in_which_every_case_is_skipped_never_says_passed(tmp_path):
    suite = _suite(tmp_path, [{"candidate": "cuda-emu", "against": "reference-fp64", "max_row_ulp": 1.5}])
    result = _run("run", suite, "--backends", "reference-fp64", "--reference-only", "reference-fp64")
    last = result.stdout.strip().splitlines()[-1]
    assert result.exit_code == 1 and last.startswith(
        "nothing judged: 0 passed, 0 failed, 0 errors, 2 skipped"
    )


@pytest.mark.parametrize(
    ("summary", "complete", "verdict"),
    [
        ({"pass": 3}, True, "passed"),
        ({"pass": 3}, False, "incomplete"),
        ({"pass": 2, "fail": 1}, False, "failed"),
        ({"pass": 2, "error": 1}, True, "failed"),
        ({"skipped": 4}, True, "nothing judged"),
        ({}, True, "nothing judged"),
    ],
)
def test_run_verdict(summary, complete, verdict):
    assert run_verdict(summary, complete) == verdict


def test_the_same_suite_twice_runs_each_case_once(tmp_path):
    suite = _suite(tmp_path, [FP64])
    session = Session(SessionOptions(suites=(suite, suite)))
    assert len(session.cases) == 2 and len({c.id for c in session.cases}) == 2


@pytest.mark.parametrize(
    ("expression", "ids"),
    [
        ("bs1", ["a.kimi-k2.6-tp8-h8-bs1-p4096-chain2"]),
        ("bs16", ["b.kimi-k2.6-tp8-h8-bs16-p4096-chain2"]),
        ("full and bs1", []),
        ("chain2 and not bs16", ["a.kimi-k2.6-tp8-h8-bs1-p4096-chain2"]),
        ("kimi-k2.6", ["a.kimi-k2.6-tp8-h8-bs1-p4096-chain2", "b.kimi-k2.6-tp8-h8-bs16-p4096-chain2"]),
        ("h8-bs16", ["b.kimi-k2.6-tp8-h8-bs16-p4096-chain2"]),
        ("p409", []),
        ("gpu", ["b.kimi-k2.6-tp8-h8-bs16-p4096-chain2"]),
    ],
)
def test_k_matches_whole_id_parts_and_tags(expression, ids):
    class Fake:
        def __init__(self, id: str, tags: tuple[str, ...]) -> None:
            self.id, self.tags = id, tags

    cases = [
        Fake("a.kimi-k2.6-tp8-h8-bs1-p4096-chain2", ("cpu",)),
        Fake("b.kimi-k2.6-tp8-h8-bs16-p4096-chain2", ("gpu",)),
    ]
    keep = case_filter(expression)
    assert [c.id for c in cases if keep(c)] == ids


def _shard_document(shard: str | None, case_ids: list[str]) -> dict:
    return {
        "format": "ddbench-results",
        "version": 1,
        "started": "2026-12-01T00:00:00+00:00",
        "finished": "2026-12-01T00:01:00+00:00",
        "complete": True,
        "suites": ["s.json"],
        "shard": shard,
        "environment": {},
        "summary": {"pass": len(case_ids)},
        "cases": [{"id": i, "status": "pass", "pairs": []} for i in case_ids],
    }


def test_merge_of_two_of_three_shards_is_incomplete_and_names_the_missing_one():
    merged = merge_results([("a", _shard_document("1/3", ["x"])), ("c", _shard_document("3/3", ["z"]))])
    assert merged["complete"] is False and merged["missing_shards"] == ["2/3"]
    whole = merge_results([(f, _shard_document(f"{i}/3", [f])) for i, f in ((1, "a"), (2, "b"), (3, "c"))])
    assert whole["complete"] is True and whole["missing_shards"] == []


def test_merge_refuses_shards_of_different_splits():
    with pytest.raises(InputError, match="different splits"):
        merge_results([("a", _shard_document("1/2", ["x"])), ("b", _shard_document("2/3", ["y"]))])
    with pytest.raises(InputError, match="mixes whole runs"):
        merge_results([("a", _shard_document(None, ["x"])), ("b", _shard_document("2/3", ["y"]))])


def test_the_results_file_records_its_shard(tmp_path):
    suite = _suite(tmp_path, [FP64])
    out = tmp_path / "r.json"
    result = _run("run", suite, "--shard", "2/2", "--json", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["shard"] == "2/2"


@pytest.mark.parametrize("option", ["--json", "--junit", "--markdown"])
def test_an_output_that_would_overwrite_the_suite_is_refused_before_running(tmp_path, option):
    suite = _suite(tmp_path, [FP64])
    before = Path(suite).read_text()
    result = _run("run", suite, option, suite)
    assert result.exit_code == 2 and "writing it would destroy it" in result.stderr
    assert Path(suite).read_text() == before


def test_an_output_under_a_regular_file_is_refused_before_running(tmp_path):
    suite = _suite(tmp_path, [FP64])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = _run("run", suite, "--junit", blocker / "out.xml")
    assert result.exit_code == 2 and "--junit" in result.stderr and "[1/2]" not in result.stderr

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
from ddbench.runner.roles import Role, roles_in
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


class Split:
    name = "split"  # correct through run(), wrong through the prepared launch that timing uses

    def availability(self):
        return Availability.yes("test")

    def run(self, inputs):
        from ddbench.backends.reference import ReferenceBackend

        return ReferenceBackend().run(inputs)

    def prepare(self, inputs):
        def launch():
            inputs.o_extend.zero_()
            return inputs.o_extend

        return launch


class Raises(Ones):
    name = "raises"

    def availability(self):
        raise RuntimeError("driver exploded")


class Reference(Ones):
    name = "reference"


class TritonCopy(Ones):
    name = "triton-copy"  # a user's kernel exactly as good as SGLang's: a bit copy of its output

    def run(self, inputs):
        from ddbench.backends import get_backend

        return get_backend("triton").run(inputs)
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
    assert "Bounds exist for: candidate, cuda, cuda-emu, triton" in result.stderr
    assert "passed" not in result.stdout


def test_a_kernel_as_exact_as_triton_passes_as_candidate_and_fails_the_project_kernels_bounds(
    tmp_path, monkeypatch
):
    """`--as candidate`: no worse than Triton + 1 row-ULP against fp64 and within 3 of Triton, the role
    the README gives a user's kernel; `--as cuda-emu` holds it to the project kernel's own bounds (fp64
    within 1.5 row-ULP and no bias), which SGLang's own output does not meet."""
    (tmp_path / "wrongkern.py").write_text(WRONG)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["run", SMOKE, "-k", "q1 or star9", "--backends", "reference-fp64,triton,wrongkern:TritonCopy"]
    judged = _run(*args, "--as", "candidate")
    assert judged.exit_code == 0, judged.output
    assert judged.stdout.strip().splitlines()[-1].startswith("passed: 2 passed, 0 failed")
    strict = _run(*args, "--as", "cuda-emu")
    assert strict.exit_code == 1 and "abs_gain" in strict.stdout


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


def test_a_candidate_whose_truth_does_not_run_is_not_judged_by_that_bound(tmp_path, monkeypatch):
    """A bound judges nothing when its `against` is not run: the mutant borrows cuda-emu's bounds, which are
    against reference-fp64, and reference-fp64 is not asked for — so nothing would judge the mutant."""
    suite = _suite(
        tmp_path,
        [
            {"candidate": "triton", "against": "reference", "max_row_ulp": 3.0},
            {"candidate": "cuda-emu", "against": "reference-fp64", "max_row_ulp": 1.5},
        ],
    )
    result = _run("run", suite, "--backends", "reference,triton,mutant-emu:mask-stride", "--as", "cuda-emu")
    assert result.exit_code == 2 and "mutant-emu:mask-stride" in result.stderr


def test_what_is_judged_is_the_prepared_launch_that_is_timed(tmp_path, monkeypatch):
    (tmp_path / "wrongkern.py").write_text(WRONG)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = _suite(tmp_path, [FP64])
    args = ["--backends", "reference,reference-fp64", "--backend", "wrongkern:Split", "--as", "reference"]
    result = _run("run", suite, *args)
    assert result.exit_code == 1 and "2 failed" in result.stdout


def test_plugin_problems_are_clear_errors(tmp_path, monkeypatch):
    (tmp_path / "wrongkern.py").write_text(WRONG)
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = _suite(tmp_path, [FP64])
    raising = _run("run", suite, "--backend", "wrongkern:Raises", "--as", "reference")
    assert raising.exit_code == 3
    assert "raises: unavailable: availability() failed: RuntimeError" in raising.stderr
    shadow = _run("run", suite, "--backend", "wrongkern:Reference", "--as", "reference")
    assert shadow.exit_code == 2 and "the name of a built-in backend" in shadow.stderr
    no_template = _run("run", suite, "--as", "nosuch")
    assert no_template.exit_code == 2
    assert "no selected case has a bound with candidate 'nosuch'" in no_template.stderr


def test_a_family_name_given_to_backend_is_a_name_not_a_module(tmp_path):
    suite = _suite(tmp_path, [{"candidate": "cuda-emu", "against": "reference-fp64", "max_row_ulp": 1.5}])
    args = ["--backends", "reference-fp64", "--backend", "mutant:draft-missing", "--as", "cuda-emu"]
    result = _run("run", suite, *args)
    assert result.exit_code == 1 and "2 failed" in result.stdout


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
    everything = roles_in(case, ["reference", "reference-fp64", "triton"])
    assert everything == {
        "reference": Role.CANDIDATE,
        "reference-fp64": Role.REFERENCE,
        "triton": Role.UNJUDGED,
    }
    assert roles_in(case, ["triton"], reference_only=["triton"]) == {"triton": Role.REFERENCE}
    # Without its truth the candidate is judged by nothing, and then the truth compares nothing.
    assert roles_in(case, ["reference"]) == {"reference": Role.UNJUDGED}
    assert roles_in(case, ["reference-fp64"]) == {"reference-fp64": Role.UNJUDGED}


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


A, B = "a.kimi-k2.6-tp8-h8-bs1-p4096-chain2", "b.kimi-k2.6-tp8-h8-bs16-p4096-chain2"
FULL_A, FULL_B = "full.kimi-k2.6-tp8-h8-bs1-p4096-chain2", "full.kimi-k2.6-tp8-h8-bs16-p4096-chain2"


@pytest.mark.parametrize(
    ("expression", "ids"),
    [
        ("bs1", [A, FULL_A]),
        ("bs16", [B, FULL_B]),
        ("full and bs1", [FULL_A]),
        ("full and bs16", [FULL_B]),
        ("6", []),
        ("k2.6 and bs16", [B, FULL_B]),
        ("chain2 and not bs16 and not full", [A]),
        ("cpu or (kimi-k2.6 and bs16 and not full)", [A, B]),
        ("h8-bs16 and not full", [B]),
        ("p409", []),
        ("cpu", [A]),
    ],
)
def test_k_matches_whole_id_parts_and_tags(expression, ids):
    class Fake:
        def __init__(self, id: str, tags: tuple[str, ...]) -> None:
            self.id, self.tags = id, tags

    cases = [Fake(A, ("cpu",)), Fake(B, ("gpu",)), Fake(FULL_A, ("gpu",)), Fake(FULL_B, ("gpu",))]
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


def test_the_shard_is_recorded_as_merge_reads_it(tmp_path):
    suite = _suite(tmp_path, [FP64])
    out = tmp_path / "r.json"
    assert _run("run", suite, "--shard", "01/2", "--json", out).exit_code == 0
    assert json.loads(out.read_text())["shard"] == "1/2"
    empty = _run("run", suite, "--shard", "3/3", "-k", "one")
    assert empty.exit_code == 2 and "shard 3/3 holds none of the selected cases" in empty.stderr


def test_merge_refuses_shards_of_different_runs():
    one, other = _shard_document("1/2", ["x"]), _shard_document("2/2", ["y"])
    other["suites"] = ["other.json"]
    with pytest.raises(InputError, match="suites or -k filters differ"):
        merge_results([("a", one), ("b", other)])


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

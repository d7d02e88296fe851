"""The `ddbench` CLI end to end on tiny CPU suites: exit codes, reports, and plug-in backends.

The plug-in backends below are reached through `--backend MODULE:ATTR`; the `plugins` fixture registers this
module under a fixed name so that works whatever pytest's import mode called it.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result
from safetensors.torch import load_file

from ddbench.backends import Availability
from ddbench.backends.reference import ReferenceBackend
from ddbench.backends.registry import known_backend_names
from ddbench.backends.triton_sglang import SglangTritonBackend
from ddbench.cli.main import cli
from ddbench.inputs.layout import VerifyInputs
from ddbench.inputs.suite_file import load_suite_file

PLUGIN_MODULE = "ddbench_test_cli_plugins"
ROOT = Path(__file__).resolve().parent.parent

# --- plug-in backends --------------------------------------------------------------------------------------


class _Base:
    name = "base"

    def availability(self) -> Availability:
        return Availability.yes("test plug-in")

    def reference_bf16(self, inputs: VerifyInputs) -> torch.Tensor:
        return ReferenceBackend().run(inputs).to(inputs.o_extend.dtype)


class Exact(_Base):
    """A correct kernel: writes the (rounded) true result into the poisoned buffer and returns it."""

    name = "exact"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        inputs.o_extend.copy_(self.reference_bf16(inputs))
        return inputs.o_extend


class Scaled(_Base):
    """5 % too large everywhere: a wrong softmax scale or normalisation."""

    name = "scaled"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        return (self.reference_bf16(inputs).float() * 1.05).to(inputs.o_extend.dtype)


class ZeroRow(_Base):
    """One output row zeroed: a tile that was skipped but whose buffer had been zero-filled."""

    name = "zerorow"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        out = self.reference_bf16(inputs)
        out[-1, 0] = 0
        return out


class Partial(_Base):
    """Writes only the first draft token's rows of o_extend and returns the buffer."""

    name = "partial"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        inputs.o_extend[:1] = self.reference_bf16(inputs)[:1]
        return inputs.o_extend


class Exploding(_Base):
    name = "exploding"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        raise RuntimeError("kernel launch failed: too many resources requested")


class BracketError(_Base):
    """An error text with square brackets: shown as text, never parsed as terminal markup."""

    name = "brackets"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        raise RuntimeError("cannot open [/dev/nvidia0] [bold]")


class WrongShape(_Base):
    name = "wrongshape"

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        return self.reference_bf16(inputs)[:, :, :256]


class Unavailable(_Base):
    name = "nodevice"

    def availability(self) -> Availability:
        return Availability.no("needs sm_120, found none")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:  # pragma: no cover - must never be called
        raise AssertionError("an unavailable backend was run")


exact_instance = Exact()


def make_exact() -> Exact:
    return Exact()


NotABackend = object()


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setitem(sys.modules, PLUGIN_MODULE, sys.modules[__name__])


# --- helpers -----------------------------------------------------------------------------------------------


def write_suite(
    directory: Path,
    candidate: str = "exact",
    cases: list[dict[str, Any]] | None = None,
    bound: dict[str, Any] | None = None,
    name: str = "tiny",
) -> Path:
    bound = bound or {"max_row_ulp": 1.0, "mean_row_ulp": 0.5, "rel_l2": 0.01}
    doc = {
        "name": name,
        "defaults": {
            "model": "kimi-k2.6",
            "layout": {"tp": 8},
            "prefix": 9,
            "tags": ["tiny"],
            "parity": [{"candidate": candidate, "against": "reference", **bound}],
        },
        "cases": cases or [{"tree": {"kind": "chain", "length": 4}}],
    }
    path = directory / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


TWO_CASES = [
    {"tree": {"kind": "chain", "length": 4}},
    {"batch_size": 2, "prefix": [3, 17], "tree": {"kind": "ddtree", "budget": 8}, "tags": ["dd"]},
]


def invoke(*args: str) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in result.output
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def plugin(attr: str) -> str:
    return f"{PLUGIN_MODULE}:{attr}"


def run_json(tmp_path: Path, *args: str) -> tuple[Result, dict[str, Any]]:
    out = tmp_path / "results.json"
    result = invoke("run", *args, "--json", out)
    return result, json.loads(out.read_text())


# --- exit 0 ------------------------------------------------------------------------------------------------


def test_exact_plugin_passes_against_reference(tmp_path, plugins):
    suite = write_suite(tmp_path, cases=TWO_CASES)
    result, doc = run_json(tmp_path, suite, "--backend", plugin("Exact"))
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed" in result.stdout
    assert doc["complete"] is True
    assert [c["status"] for c in doc["cases"]] == ["pass", "pass"]
    for case in doc["cases"]:
        assert set(case["backends"]) == {"reference", "exact"}
        (pair,) = case["pairs"]
        assert (pair["candidate"], pair["against"], pair["status"]) == ("exact", "reference", "pass")
        figures = pair["figures"]
        assert figures["unwritten"] == 0 and figures["nan"] == 0
        assert figures["max_row_ulp"] <= 0.5  # round-to-nearest of the reference itself
        assert figures["max_abs"] > 0  # bf16 vs float32: not trivially identical


@pytest.mark.parametrize("attr", ["exact_instance", "make_exact", "Exact"])
def test_backend_spec_forms(tmp_path, plugins, attr):
    suite = write_suite(tmp_path)
    result = invoke("run", suite, "--backend", plugin(attr))
    assert result.exit_code == 0, result.output


# --- exit 1 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attr", "reason"),
    [("Scaled", "rel_l2 "), ("ZeroRow", "max_row_ulp ")],
)
def test_wrong_output_fails(tmp_path, plugins, attr, reason):
    name = attr.lower()
    suite = write_suite(tmp_path, candidate=name)
    result, doc = run_json(tmp_path, suite, "--backend", plugin(attr))
    assert result.exit_code == 1, result.output
    assert "0 passed, 1 failed" in result.stdout
    (case,) = doc["cases"]
    assert case["status"] == "fail"
    (pair,) = case["pairs"]
    assert pair["status"] == "fail"
    assert any(r.startswith(reason) for r in pair["reasons"]), pair["reasons"]
    if attr == "ZeroRow":
        assert pair["figures"]["max_row_ulp"] > 50  # a whole row off by its own magnitude
        assert pair["figures"]["worst"][:2] == [3, 0]  # last draft token, head 0
    else:
        assert 0.045 < pair["figures"]["rel_l2"] < 0.055


def test_unwritten_output_fails_with_never_written(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="partial")
    result, doc = run_json(tmp_path, suite, "--backend", plugin("Partial"))
    assert result.exit_code == 1, result.output
    (pair,) = doc["cases"][0]["pairs"]
    assert pair["status"] == "fail"
    unwritten = 3 * 8 * 512  # draft tokens 1..3 of a chain of 4, 8 heads per rank, 512 values
    assert f"{unwritten} output elements never written" in pair["reasons"]
    assert pair["figures"]["unwritten"] == unwritten
    assert "0 passed, 1 failed" in result.stdout


def test_backend_that_raises_is_an_error_not_a_crash(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="exploding", cases=TWO_CASES)
    result, doc = run_json(tmp_path, suite, "--backend", plugin("Exploding"))
    assert result.exit_code == 1, result.output
    assert "0 passed, 0 failed, 2 errors" in result.stdout
    assert doc["complete"] is True  # the run went on to the next case
    for case in doc["cases"]:
        assert case["status"] == "error"
        run = case["backends"]["exploding"]
        assert run["ok"] is False
        assert run["error"] == "RuntimeError: kernel launch failed: too many resources requested"
        assert case["backends"]["reference"]["ok"] is True
        (pair,) = case["pairs"]
        assert pair["status"] == "error"
        assert pair["reasons"] == [f"exploding: {run['error']}"]
    assert "error" in result.stdout


def test_backend_error_text_with_brackets_is_reported_verbatim(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="brackets")
    result, doc = run_json(tmp_path, suite, "--backend", plugin("BracketError"))
    assert result.exit_code == 1, result.output
    (case,) = doc["cases"]
    assert case["backends"]["brackets"]["error"] == "RuntimeError: cannot open [/dev/nvidia0] [bold]"
    assert "[bold]" in result.stdout


def test_backend_returning_a_wrong_shape_is_an_error(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="wrongshape")
    result, doc = run_json(tmp_path, suite, "--backend", plugin("WrongShape"))
    assert result.exit_code == 1, result.output
    (case,) = doc["cases"]
    assert case["status"] == "error"
    assert (
        case["backends"]["wrongshape"]["error"]
        == "returned (4, 8, 256), expected a tensor of shape (4, 8, 512)"
    )


def test_nothing_judged_is_not_a_pass(tmp_path):
    # The bound names triton; only the reference is asked for: nothing could judge anything, so the run is
    # refused before any work.
    suite = write_suite(tmp_path, candidate="triton")
    result = invoke("run", suite, "--backends", "reference")
    assert result.exit_code == 2, result.output
    assert "nothing would look at their output" in result.stderr


# --- exit 2 ------------------------------------------------------------------------------------------------


def test_bad_suite_exits_2(tmp_path):
    bad = Path(__file__).parent / "suites" / "bad" / "heads_not_divisible_by_tp.json"
    result = invoke("run", bad, "--backends", "reference")
    assert result.exit_code == 2
    assert f"{bad}: cases[0].layout: 128 heads of deepseek-v3" in result.stderr


def test_unknown_backend_name_exits_2(tmp_path):
    suite = write_suite(tmp_path)
    result = invoke("run", suite, "--backends", "reference,nosuch")
    assert result.exit_code == 2
    assert "unknown backend 'nosuch'; known: " in result.stderr
    assert "reference" in result.stderr.split("known:")[1]


def test_filter_matching_nothing_exits_2(tmp_path):
    suite = write_suite(tmp_path)
    result = invoke("run", suite, "--backends", "reference", "-k", "nothing_like_this")
    assert result.exit_code == 2
    assert "no case matches -k 'nothing_like_this'" in result.stderr


def test_malformed_filter_exits_2(tmp_path):
    suite = write_suite(tmp_path)
    for command in ("run", "list"):
        result = invoke(command, suite, "-k", "tiny and (")
        assert result.exit_code == 2, command
        assert "-k: unexpected end in filter 'tiny and ('" in result.stderr


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_colon_here", "--backend: expected module:attribute, got 'no_colon_here'"),
        (f"{PLUGIN_MODULE}:Missing", f"--backend: module {PLUGIN_MODULE} has no attribute 'Missing'"),
        (
            f"{PLUGIN_MODULE}:NotABackend",
            "does not implement the backend protocol (missing name, availability, run)",
        ),
    ],
)
def test_bad_backend_spec_exits_2(tmp_path, plugins, spec, needle):
    suite = write_suite(tmp_path)
    result = invoke("run", suite, "--backend", spec)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr


def test_usage_errors_exit_2(tmp_path):
    assert invoke("run").exit_code == 2  # no suite
    assert invoke("run", write_suite(tmp_path), "--no-such-option").exit_code == 2
    assert invoke("frobnicate").exit_code == 2


# --- exit 3 ------------------------------------------------------------------------------------------------


def test_unavailable_backend_exits_3_with_its_reason(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="nodevice")
    out = tmp_path / "results.json"
    result = invoke("run", suite, "--backend", plugin("Unavailable"), "--json", out)
    assert result.exit_code == 3, result.output
    assert "nodevice: unavailable: needs sm_120, found none" in result.stderr
    assert not out.exists()  # stopped before any work


def test_unimportable_backend_module_exits_3(tmp_path):
    suite = write_suite(tmp_path)
    result = invoke("run", suite, "--backend", "ddbench_no_such_module_xyz:Thing")
    assert result.exit_code == 3, result.output
    assert "cannot import ddbench_no_such_module_xyz" in result.stderr


# --- reports -----------------------------------------------------------------------------------------------


def test_reports_json_junit_and_outputs(tmp_path, plugins):
    suite = write_suite(tmp_path, cases=TWO_CASES, bound={"max_row_ulp": 1.0})
    doc = json.loads(suite.read_text())
    # A second bound on every case: two judged pairs per case (exact and scaled, the latter failing).
    doc["defaults"]["parity"].append({"candidate": "scaled", "against": "reference", "rel_l2": 0.01})
    suite.write_text(json.dumps(doc))
    ids = [c.id for c in load_suite_file(suite).cases]
    results, junit, outputs = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "outs"
    result = invoke(
        "run",
        suite,
        "--backend",
        plugin("Exact"),
        "--backend",
        plugin("Scaled"),
        "--json",
        results,
        "--junit",
        junit,
        "--save-outputs",
        outputs,
    )
    assert result.exit_code == 1, result.output

    data = json.loads(results.read_text())
    assert data["format"] == "ddbench-results"
    assert data["complete"] is True and data["finished"]
    assert data["suites"] == [str(suite)]
    assert [c["id"] for c in data["cases"]] == ids
    assert data["summary"] == {"fail": 2}
    for case in data["cases"]:
        assert [(p["candidate"], p["status"]) for p in case["pairs"]] == [
            ("exact", "pass"),
            ("scaled", "fail"),
        ]

    root = ET.parse(junit).getroot()
    testcases = root.findall(".//testcase")
    assert len(testcases) == len(ids) * 2
    names = [t.get("name") for t in testcases]
    assert names == [f"{i}[{c} vs reference]" for i in ids for c in ("exact", "scaled")]
    (ts,) = root.findall("testsuite")
    assert (ts.get("name"), ts.get("tests"), ts.get("failures"), ts.get("errors")) == ("tiny", "4", "2", "0")
    assert [t.find("failure") is not None for t in testcases] == [False, True, False, True]

    files = sorted(outputs.glob("*.safetensors"))
    assert [f.name for f in files] == sorted(f"{i}.safetensors" for i in ids)
    saved = load_file(outputs / f"{ids[1]}.safetensors")
    assert set(saved) == {"reference", "exact", "scaled"}
    total_q = 2 * 9  # bs 2, ddtree budget 8 -> q_len 9
    assert saved["exact"].shape == (total_q, 8, 512) and saved["exact"].dtype == torch.bfloat16
    assert saved["reference"].dtype == torch.float32
    assert torch.equal(saved["exact"], saved["reference"].to(torch.bfloat16))
    assert torch.isfinite(saved["reference"]).all()


def test_json_records_errors_and_complete_per_case(tmp_path, plugins):
    suite = write_suite(tmp_path, candidate="exploding")
    result, doc = run_json(tmp_path, suite, "--backend", plugin("Exploding"), "--backends", "reference")
    assert result.exit_code == 1
    assert doc["complete"] is True
    assert doc["summary"] == {"error": 1}
    # --backends selects the built-ins; --backend adds the plug-in on top.
    assert set(doc["cases"][0]["backends"]) == {"reference", "exploding"}


# --- list, validate, env -----------------------------------------------------------------------------------


def test_list_ids(tmp_path):
    suite = write_suite(tmp_path, cases=TWO_CASES)
    ids = [c.id for c in load_suite_file(suite).cases]
    result = invoke("list", suite, "--ids")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ids
    filtered = invoke("list", suite, "--ids", "-k", "dd")
    assert filtered.stdout.splitlines() == [ids[1]]


def test_list_table(tmp_path):
    suite = write_suite(tmp_path, cases=TWO_CASES)
    result = invoke("list", suite)
    assert result.exit_code == 0
    assert "tiny: 2 cases" in result.stdout
    for case in load_suite_file(suite).cases:
        assert case.id in result.stdout


def test_list_shipped_smoke_suite():
    smoke = ROOT / "suites" / "smoke.json"
    result = invoke("list", smoke, "--ids")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [c.id for c in load_suite_file(smoke).cases]


def test_validate_ok(tmp_path):
    suite = write_suite(tmp_path, cases=TWO_CASES)
    result = invoke("validate", suite)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"ok: {suite} (tiny, 2 cases)"


@pytest.fixture
def triton_stubbed(monkeypatch):
    # Asking the real Triton backend imports SGLang (seconds) and sets TRITON_INTERPRET for the whole process.
    monkeypatch.setattr(SglangTritonBackend, "availability", lambda self: Availability.no("stubbed in tests"))


def test_env_lists_the_backends(triton_stubbed):
    result = invoke("env")
    assert result.exit_code == 0, result.output
    assert "backends:" in result.stdout
    assert "reference: available: torch, float32 accumulation" in result.stdout
    assert "reference-fp64: available: torch, float64 accumulation" in result.stdout
    assert "triton: unavailable: stubbed in tests" in result.stdout
    assert "torch: " in result.stdout


def test_env_json(triton_stubbed):
    result = invoke("env", "--json")
    assert result.exit_code == 0
    facts = json.loads(result.stdout)
    assert set(facts["backends"]) == set(known_backend_names())
    assert facts["backends"]["reference"] == {"available": True, "detail": "torch, float32 accumulation"}
    assert facts["backends"]["triton"] == {"available": False, "detail": "stubbed in tests"}
    assert facts["device"]["kind"] in ("cpu", "cuda")
    assert facts["packages"]["torch"] == torch.__version__


def test_version_and_help():
    assert invoke("--version").exit_code == 0
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "list", "validate", "env"):
        assert command in result.stdout

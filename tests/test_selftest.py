"""`ddbench selftest` on the smoke suite: every mutant (the reference path and the emulated kernel's adapter,
one per classic mistake) is caught by parity and named by explain; the controls pass; a hole exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.explain import HYPOTHESES
from ddbench.explain.mutants import EMU_MISTAKES

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "suites" / "smoke.json"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("selftest")
    json_path, md_path = tmp / "selftest.json", tmp / "selftest.md"
    result = invoke("selftest", "--suite", str(SMOKE), "--json", str(json_path), "--markdown", str(md_path))
    return {"result": result, "report": json.loads(json_path.read_text()), "markdown": md_path.read_text()}


@pytest.mark.slow
def test_every_mutant_is_caught_and_diagnosed_on_the_smoke_suite(smoke):
    result, report = smoke["result"], smoke["report"]
    assert result.exit_code == 0, result.output
    expected = {f"mutant:{h.name}" for h in HYPOTHESES} | {f"mutant-emu:{n}" for n in EMU_MISTAKES}
    assert {m["name"] for m in report["mutants"]} == expected
    assert len(expected) == len(HYPOTHESES) + 19
    for m in report["mutants"]:
        assert m["caught"] > 0 and m["diagnosed"] > 0 and m["ok"], m["name"]
        assert m["holes"] == [], f"{m['name']} changed the output and passed on {m['holes']}"
        assert m["cases"] == len(report["cases"])
    assert report["kill_rate"] == 1.0 and report["diagnosis_rate"] == 1.0 and report["ok"]
    assert report["case_diagnosis_rate"] > 0.9


@pytest.mark.slow
def test_reference_mutants_are_named_wherever_they_are_caught(smoke):
    for m in smoke["report"]["mutants"]:
        if m["kind"] == "mutant":
            assert m["diagnosed"] == m["caught"], m["name"]


@pytest.mark.slow
def test_controls_pass_and_match_the_reference(smoke):
    controls = smoke["report"]["controls"]
    assert [c["name"] for c in controls] == [
        "control:reference-bf16",
        "control:reference-fp64-bf16",
        "control:p-bfloat16",
        "control:p-float16",
        "control:cuda-emu",
    ]
    for c in controls:
        assert c["caught"] == 0 and c["ok"]
        assert {o["verdict"] for o in c["outcomes"]} == {"matches-reference"}
        assert c["max_abs_gain"] <= 0.1, c["name"]  # correct kernels carry no bias the gain figure sees


@pytest.mark.slow
def test_the_small_channel_mistake_is_caught_by_the_channel_figure_alone(smoke):
    """Row-scaled limits miss an error confined to a row's small channels; max_channel_ulp alone fails it."""
    m = next(m for m in smoke["report"]["mutants"] if m["name"] == "mutant:row-shared-exponent")
    caught = [o for o in m["outcomes"] if o["caught"]]
    assert caught and all(o["verdict"] == "explained" for o in caught)
    for o in caught:
        figures = [r.split(": ", 1)[1].split()[0] for r in o["reasons"]]  # "vs reference-fp64: <figure> ..."
        assert figures and set(figures) == {"max_channel_ulp"}, o["reasons"]


@pytest.mark.slow
def test_outcomes_say_why(smoke):
    m = next(m for m in smoke["report"]["mutants"] if m["name"] == "mutant-emu:mask-stride")
    caught = [o for o in m["outcomes"] if o["caught"]]
    assert all(o["reasons"] and o["top"] == "mask-stride" and o["verdict"] == "explained" for o in caught)
    invisible = [o for o in m["outcomes"] if not o["visible"]]
    assert [o["case"].split(".")[0] for o in invisible] == ["q1"]  # one draft token: one mask row
    assert not any(o["caught"] for o in invisible)


@pytest.mark.slow
def test_terminal_and_markdown_tables(smoke):
    out = smoke["result"].stdout
    assert "mutation self-test" in out and "mutant-emu:draft-missing" in out
    assert "kill rate 41/41 (100%), diagnosis rate 41/41 (100%)" in out
    md = smoke["markdown"]
    assert md.startswith("### Mutation self-test") and "Kill rate **100%**" in md
    assert "| `mutant-emu:causal-mask` | 19/22 | 19/19 |" in md


def test_a_mutant_no_case_exposes_exits_1(tmp_path):
    suite = tmp_path / "chain.json"
    suite.write_text(
        json.dumps(
            {
                "name": "chain",
                "defaults": {"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 9},
                "cases": [{"tree": {"kind": "chain", "length": 4}}],
            }
        )
    )
    result = invoke("selftest", "--suite", str(suite), "--mutant", "causal-mask", "--no-emu")
    assert result.exit_code == 1
    assert (
        "mutant:causal-mask: never caught: add a case where this mistake changes the output" in result.stderr
    )
    assert "0/1" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mutant", "nosuch"], "unknown mutant 'nosuch'"),
        (["--suite", "missing.json"], "no such file"),
        (["-k", "nothing-matches-this"], "no case matches"),
    ],
)
def test_bad_input_exits_2(args, message):
    extra = [] if "--suite" in args else ["--suite", str(SMOKE)]
    result = invoke("selftest", *extra, *args)
    assert result.exit_code == 2 and message in result.stderr, result.output

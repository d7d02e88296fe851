"""Model baselines: exact counters, so any extra byte, conflict or wave is a regression; times under the
same calibration only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.counters import parse_counters
from ddbench.errors import InputError
from ddbench.gpus import RTX_PRO_6000
from ddbench.inputs.suite_file import load_suite_file
from ddbench.model.calibration import UNCALIBRATED
from ddbench.model.floor import CaseShape
from ddbench.model.model_baseline import Tolerances, baseline_document, regressions
from ddbench.model.profile import profile_case
from ddbench.model.tiling_counters import tiling_counters
from ddbench.runner.selection import select_cases

SMOKE = str(Path(__file__).resolve().parents[1] / "suites" / "smoke.json")
PICK = "ddtree and p21"
REGS = {"verify_attention_kernel": 167, "combine_parts_kernel": 40}


def _profile(shape, counters=None, case_id="c"):
    doc = counters or tiling_counters(shape)
    return profile_case(case_id, shape, doc, RTX_PRO_6000, REGS, UNCALIBRATED)


def _compare(profile, baseline, **kw):
    return regressions([profile], baseline, "rtx-pro-6000", UNCALIBRATED.label, Tolerances(**kw))


def test_the_same_counters_show_no_regression():
    shape = CaseShape((4096,), 9, 8)
    base = baseline_document([_profile(shape)], "rtx-pro-6000", UNCALIBRATED.label)
    assert _compare(_profile(shape), base) == ([], [])


def test_new_bank_conflicts_and_extra_dram_bytes_are_regressions():
    shape = CaseShape((4096,), 9, 8)
    base = baseline_document([_profile(shape)], "rtx-pro-6000", UNCALIBRATED.label)
    worse = tiling_counters(shape).to_json()
    worse["kernels"][0]["totals"]["shared"]["bank_conflicts"] += 1
    worse["kernels"][0]["totals"]["global"]["unique_sectors"] += 1
    found, _ = _compare(_profile(shape, parse_counters(worse)), base)
    assert [line.split(": ")[1].split()[0] for line in found] == ["unique_dram_bytes", "bank_conflicts"]


def test_a_slower_modeled_time_beyond_the_tolerance_regresses_and_a_ceiling_holds():
    base = baseline_document([_profile(CaseShape((4096,), 9, 8))], "rtx-pro-6000", UNCALIBRATED.label)
    longer = _profile(CaseShape((4096,), 9, 8), tiling_counters(CaseShape((8192,), 9, 8)))
    found, _ = _compare(longer, base, modeled_us_rel=0.05)
    assert any("modeled_us" in line for line in found)
    found, _ = _compare(_profile(CaseShape((21,), 9, 8), case_id="c"), base, cuda_over_triton_max=0.5)
    assert any("cuda/triton" in line for line in found)


def test_another_calibration_compares_counters_only_and_new_cases_are_noted():
    shape = CaseShape((4096,), 9, 8)
    for label, expect_regression in ((UNCALIBRATED.label, True), ("fitted elsewhere", False)):
        base = baseline_document([_profile(shape)], "rtx-pro-6000", label)
        base["cases"]["c"]["modeled_us"] /= 2
        found, notes = _compare(_profile(shape), base)
        assert bool(found) is expect_regression
        assert any("not compared" in n for n in notes) is not expect_regression
    _, notes = _compare(_profile(shape, case_id="other"), base)
    assert "other: not in the baseline" in notes


BAD_WAVES = {
    "kind": "model-baseline",
    "format_version": 1,
    "gpu": "rtx-pro-6000",
    "cases": {"c": {"waves": -1}},
}


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"kind": "results"}, "not a model baseline"),
        ({"kind": "model-baseline", "format_version": 1, "gpu": "h200", "cases": {}}, "gpu"),
        (BAD_WAVES, "cases.c."),
    ],
)  # fmt: skip
def test_a_bad_baseline_names_the_file(doc, where):
    with pytest.raises(InputError) as err:
        regressions([], doc, "rtx-pro-6000", UNCALIBRATED.label, Tolerances(), "b.json")
    assert err.value.message.startswith("b.json") and where in err.value.message


def test_the_cli_writes_a_baseline_and_fails_on_a_regression(tmp_path, parity_results):
    cases = select_cases([load_suite_file(SMOKE)], PICK)
    counters = {c.id: tiling_counters(CaseShape.of(c)).to_json() for c in cases}
    (tmp_path / "c.json").write_text(json.dumps(counters))
    regs = [{"arch": "sm_120", "kernels": [{"name": "verify_attention_kernel", "registers": 167}]}]
    (tmp_path / "r.json").write_text(json.dumps(regs))
    common = [
        "profile",
        SMOKE,
        "-k",
        PICK,
        "--counters",
        str(tmp_path / "c.json"),
        "--registers",
        str(tmp_path / "r.json"),
    ]
    runner = CliRunner()
    update = ["--update-baseline", str(tmp_path / "b.json"), "--parity-from", str(parity_results)]
    assert runner.invoke(cli, [*common, *update]).exit_code == 0
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["kind"] == "model-baseline" and set(doc["cases"]) == {c.id for c in cases}
    ok = runner.invoke(cli, [*common, "--baseline", str(tmp_path / "b.json")])
    assert ok.exit_code == 0 and "no regression" in ok.output
    counters[cases[0].id]["kernels"][0]["totals"]["shared"]["bank_conflicts"] += 8
    (tmp_path / "c.json").write_text(json.dumps(counters))
    bad = runner.invoke(cli, [*common, "--baseline", str(tmp_path / "b.json")])
    assert bad.exit_code == 1 and f"REGRESSED {cases[0].id}: bank_conflicts" in bad.output

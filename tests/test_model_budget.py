"""A suite budget's `model` limits: checked when the suite loads (file, field, reason; exit 2), carried
through the results schema, and used by `ddbench profile --baseline` in place of the command line's."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.counters import parse_counters
from ddbench.gpus import GPUS, RTX_PRO_6000
from ddbench.inputs.suite_file import load_suite_file
from ddbench.model.calibration import UNCALIBRATED
from ddbench.model.floor import CaseShape
from ddbench.model.model_baseline import Tolerances, baseline_document, case_tolerances, regressions
from ddbench.model.profile import profile_case
from ddbench.model.tiling_counters import tiling_counters
from ddbench.results.schema import results_schema
from ddbench.suite.budget import Budget, budget_from_json
from ddbench.suite.model_budget import ModelBudget

SCHEMA = Path(__file__).resolve().parents[1] / "ddbench" / "suite" / "schema.json"
REGS = {"verify_attention_kernel": 170, "combine_parts_kernel": 40}


def _suite(tmp_path: Path, model_budget, name: str = "mb") -> Path:
    """A one-case suite (a small chain, its kernel's parity bounded) whose budget's `model` field is
    `model_budget` (raw JSON text)."""
    text = (
        f'{{"name": "{name}", "cases": [{{"model": "kimi-k2.6", "layout": {{"tp": 8}}, "prefix": 21, '
        f'"tree": {{"kind": "chain", "length": 4}}, "backends": ["reference", "cuda-emu"], '
        f'"parity": [{{"candidate": "cuda-emu", "against": "reference", "max_row_ulp": 4.0}}], '
        f'"budget": {{"model": {model_budget}}}}}]}}'
    )
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    return path


BAD = [
    (
        '{"gpu": "a100"}',
        "cases[0].budget.model.gpu",
        '"a100" is not one of "h200", "rtx-5090", "rtx-pro-6000"',
    ),
    ('{"max_new_bank_conflicts": 1}', "cases[0].budget.model", "'gpu' is a required property"),
    (
        '{"gpu": "h200", "max_extra_dram_bytes": -1}',
        "cases[0].budget.model.max_extra_dram_bytes",
        "minimum of 0",
    ),
    (
        '{"gpu": "h200", "max_new_bank_conflicts": 1.5}',
        "cases[0].budget.model.max_new_bank_conflicts",
        "integer",
    ),
    (
        '{"gpu": "h200", "max_modeled_regression": 20}',
        "cases[0].budget.model.max_modeled_regression",
        "maximum",
    ),
    (
        '{"gpu": "h200", "max_modeled_cuda_over_triton": 0}',
        "cases[0].budget.model.max_modeled_cuda_over_triton",
        "less than or equal to the minimum of 0",
    ),
    ('{"gpu": "h200", "max_waves": 1}', "cases[0].budget.model", "unknown field 'max_waves'"),
    (
        '[{"gpu": "h200"}, {"gpu": "h200"}]',
        "cases[0].budget",
        "two budgets name gpu 'h200'; give one per GPU",
    ),
    (
        '{"gpu": "h200", "max_modeled_regression": NaN}',
        "cases[0].budget.model.max_modeled_regression",
        "is nan: not a finite number",
    ),
]


@pytest.mark.parametrize(
    ("budget", "where", "reason"), BAD, ids=[b[1].rsplit(".", 1)[-1] + b[2][:12] for b in BAD]
)
def test_a_bad_model_budget_exits_2_naming_file_field_and_reason(tmp_path, budget, where, reason):
    path = _suite(tmp_path, budget)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}: {where}: " in result.output and reason in result.output, result.output
    assert "Traceback" not in result.output


def test_the_schema_lists_exactly_the_models_gpus():
    schema = json.loads(SCHEMA.read_text())
    assert schema["$defs"]["model_budget"]["properties"]["gpu"]["enum"] == sorted(GPUS)
    limits = schema["$defs"]["model_budget"]["properties"]
    assert all(spec.get("description") for spec in limits.values())


def test_defaults_and_limits_per_gpu(tmp_path):
    (case,) = load_suite_file(
        _suite(tmp_path, '[{"gpu": "h200", "max_new_bank_conflicts": 3}, {"gpu": "rtx-5090"}]')
    ).cases
    assert case.budget.model_limits("h200") == ModelBudget("h200", 0.01, 0, 3, None)
    assert case.budget.model_limits("rtx-5090") == ModelBudget("rtx-5090")
    assert case.budget.model_limits("rtx-pro-6000") is None
    assert case_tolerances([case], "h200") == {case.id: Tolerances(0.01, None, 0, 3)}
    assert case_tolerances([case], "rtx-pro-6000") == {}


def test_a_model_budget_round_trips_and_matches_the_results_schema():
    budget = budget_from_json(
        {"model": {"gpu": "h200", "max_extra_dram_bytes": 64, "max_modeled_cuda_over_triton": 0.2}}
    )
    assert budget_from_json(budget.to_json()) == budget
    assert "model" not in Budget().to_json()  # results of budgets without one are unchanged
    schema = results_schema()
    validator = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/budget"})
    assert list(validator.iter_errors(budget.to_json())) == []


def _profile(shape, counters=None, case_id="c"):
    return profile_case(case_id, shape, counters or tiling_counters(shape), RTX_PRO_6000, REGS, UNCALIBRATED)


def test_slack_on_bytes_and_conflicts_is_absolute_and_exact():
    shape = CaseShape((4096,), 9, 8)
    base = baseline_document([_profile(shape)], "rtx-pro-6000", UNCALIBRATED.label)
    worse = tiling_counters(shape).to_json()
    worse["kernels"][0]["totals"]["shared"]["bank_conflicts"] += 5
    worse["kernels"][0]["totals"]["global"]["unique_sectors"] += 2  # 64 bytes
    profile = _profile(shape, parse_counters(worse))

    def found(tolerances):
        loose = Tolerances(modeled_us_rel=1)
        lines, _ = regressions(
            [profile], base, "rtx-pro-6000", UNCALIBRATED.label, loose, "b", {"c": tolerances}
        )
        return [line.split(": ")[1].split()[0] for line in lines]

    assert found(Tolerances(1, None, 64, 5)) == []
    assert found(Tolerances(1, None, 63, 5)) == ["unique_dram_bytes"]
    assert found(Tolerances(1, None, 64, 4)) == ["bank_conflicts"]


def test_profile_judges_a_case_by_its_budget_not_the_command_line(tmp_path):
    """The budget allows 8 new bank conflicts on the RTX PRO 6000: 8 pass, 9 fail; the default fails 1."""
    suite = _suite(
        tmp_path, '{"gpu": "rtx-pro-6000", "max_new_bank_conflicts": 8, "max_modeled_regression": 0.5}'
    )
    (case,) = load_suite_file(suite).cases
    counters = {case.id: tiling_counters(CaseShape.of(case)).to_json()}
    regs = [{"arch": "sm_120", "kernels": [{"name": "verify_attention_kernel", "registers": 167}]}]
    (tmp_path / "r.json").write_text(json.dumps(regs))
    common = [
        "profile",
        str(suite),
        "--counters",
        str(tmp_path / "c.json"),
        "--registers",
        str(tmp_path / "r.json"),
    ]

    def run(extra_conflicts, *args):
        bumped = json.loads(json.dumps(counters))
        bumped[case.id]["kernels"][0]["totals"]["shared"]["bank_conflicts"] += extra_conflicts
        (tmp_path / "c.json").write_text(json.dumps(bumped))
        return CliRunner().invoke(cli, [*common, *args])

    assert run(0, "--update-baseline", str(tmp_path / "b.json")).exit_code == 0
    within = run(8, "--baseline", str(tmp_path / "b.json"))
    assert within.exit_code == 0 and "judged by their budgets' model limits" in within.output, within.output
    beyond = run(9, "--baseline", str(tmp_path / "b.json"))
    assert beyond.exit_code == 1 and f"REGRESSED {case.id}: bank_conflicts" in beyond.output
    assert "(slack 8)" in beyond.output
    on_h200 = _suite(tmp_path, '{"gpu": "h200", "max_new_bank_conflicts": 8}', name="other")
    common[1] = str(on_h200)
    assert run(0, "--update-baseline", str(tmp_path / "b.json")).exit_code == 0
    assert run(1, "--baseline", str(tmp_path / "b.json")).exit_code == 1  # the h200 budget does not hold here

"""`ddbench profile`: refuses without emulated counters (exit 3); with counters given, a modeled table,
JSON, markdown and PNG, every time labelled modeled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli
from ddbench.inputs.suite_file import load_suite_file
from ddbench.model.floor import CaseShape
from ddbench.model.tiling_counters import tiling_counters
from ddbench.runner.selection import select_cases

SMOKE = str(Path(__file__).resolve().parents[1] / "suites" / "smoke.json")
PICK = "ddtree and p21"


@pytest.fixture
def inputs(tmp_path):
    cases = select_cases([load_suite_file(SMOKE)], PICK)
    assert len(cases) >= 2
    counters = {c.id: tiling_counters(CaseShape.of(c)).to_json() for c in cases}
    (tmp_path / "counters.json").write_text(json.dumps(counters))
    report = [
        {
            "arch": a,
            "kernels": [
                {"name": "_ZN10ddk_verify23verify_attention_kernelENS_12VerifyParamsE", "registers": 167},
                {"name": "_ZN10ddk_verify20combine_parts_kernelENS_12VerifyParamsE", "registers": 40},
            ],
        }
        for a in ("sm_120", "sm_90")
    ]
    (tmp_path / "regs.json").write_text(json.dumps(report))
    return tmp_path, cases


def _run(*args):
    return CliRunner().invoke(cli, ["profile", SMOKE, "-k", PICK, *args])


def test_profile_models_the_emulations_own_counters(tmp_path):
    """No --counters: one counted launch under the emulation, every CTA (the smoke case is small)."""
    out = tmp_path / "p.json"
    result = _run("--json", str(out))
    assert result.exit_code == 0, result.output
    cases = json.loads(out.read_text())["cases"]
    assert cases and all(c["counters_source"] == "emulated, every CTA" for c in cases)
    assert (
        all(c["sanitizer"]["clean"] for c in cases) and "cases clean (racecheck, memcheck)" in result.output
    )
    assert all(c["cuda"]["modeled_us"] > 0 and c["floor"]["floor_us"] > 0 for c in cases)


def test_instructions_lists_the_source_lines_that_issue_the_most(tmp_path):
    """--instructions N: per kernel, N lines of the kernel's source with their modeled warp instructions, from
    its SASS where nvcc builds it; else it says the listing is unavailable."""
    out = tmp_path / "p.json"
    result = _run("--instructions", "3", "--no-sanitize", "--json", str(out))
    assert result.exit_code == 0, result.output
    kernels = [k for c in json.loads(out.read_text())["cases"] for k in c["cuda"]["kernels"]]
    if all(k["modeled_warp_instructions"]["method"] == "ratio" for k in kernels):
        assert "--instructions: unavailable" in result.output
        return
    assert "where each kernel's warp instructions come from" in result.output
    for k in kernels:
        issue = k["modeled_warp_instructions"]
        assert issue["method"] == "sass" and issue["least"] <= issue["likely"] <= issue["most"]
        assert sum(issue["by_line"].values()) <= issue["likely"] * (1 + 1e-6)
        assert all(line.startswith("verify_attn.cuh:") for line in issue["by_line"] if line)


def test_the_emulated_launches_are_modeled_with_ptxas_registers(inputs):
    """The counters name launches `verify` and `combine`; the report names the kernels: both must meet."""
    tmp_path, _ = inputs
    out = tmp_path / "p.json"
    result = _run("--json", str(out), "--registers", str(tmp_path / "regs.json"), "--no-sanitize")
    assert result.exit_code == 0, result.output
    for case in json.loads(out.read_text())["cases"]:
        registers = {k["name"]: k["registers_per_thread"] for k in case["cuda"]["kernels"]}
        assert registers.get("verify") == 167 and registers.get("combine", 40) == 40, registers
        assert not any("registers per thread unknown" in n for n in case["cuda"]["notes"])


def test_full_only_leaves_out_the_cases_that_would_be_sampled(tmp_path, monkeypatch):
    import ddbench.runner.emulated_counters as emulated

    out = tmp_path / "p.json"
    kept = _run("--json", str(out), "--no-sanitize", "--full-only")
    assert kept.exit_code == 0, kept.output
    assert "left out" not in kept.output  # the smoke cases are small: nothing to leave out
    assert json.loads(out.read_text())["cases"]
    monkeypatch.setattr(emulated, "SAMPLE_ABOVE", 0)
    none = _run("--json", str(out), "--no-sanitize", "--full-only")
    assert none.exit_code == 2 and "every selected case would be sampled" in none.output


def test_a_big_case_is_counted_on_one_cta_per_shape_and_says_so(tmp_path, monkeypatch):
    import ddbench.runner.emulated_counters as emulated

    monkeypatch.setattr(emulated, "SAMPLE_ABOVE", 0)
    out = tmp_path / "p.json"
    result = _run("--json", str(out))
    assert result.exit_code == 0, result.output
    assert "unique DRAM bytes derived from its addresses" in result.output
    cases = json.loads(out.read_text())["cases"]
    assert cases and all(c["counters_source"] == "emulated, one CTA per work shape" for c in cases)


def test_without_the_emulation_profile_says_it_cannot_run(monkeypatch):
    from ddbench.backends.cuda_emu import CudaEmuBackend
    from ddbench.backends.protocol import Availability

    monkeypatch.setattr(CudaEmuBackend, "availability", lambda self: Availability.no("no C++ compiler"))
    result = _run()
    assert result.exit_code == 3
    assert "profile: unavailable: no C++ compiler" in result.output
    assert "Traceback" not in result.output


def _keys(value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out)
    return out


def test_a_profile_from_given_counters_is_labelled_modeled_everywhere(inputs):
    tmp, cases = inputs
    out = tmp / "out"
    result = _run(
        "--gpu",
        "h200",
        "--counters",
        str(tmp / "counters.json"),
        "--registers",
        str(tmp / "regs.json"),
        "--json",
        str(out / "p.json"),
        "--markdown",
        str(out / "p.md"),
        "--plot",
        str(out / "p.png"),
    )
    assert result.exit_code == 0, result.output
    assert "modeled" in result.output and "measured on NVIDIA H200" in result.output
    doc = json.loads((out / "p.json").read_text())
    assert doc["kind"] == "model" and doc["calibration"].startswith("measured on NVIDIA H200")
    assert doc["model_error"].endswith("over 13 measured cases")
    assert doc["gpu"]["key"] == "h200"
    assert [c["case"] for c in doc["cases"]] == [c.id for c in cases]
    time_keys = {k for k in _keys(doc, set()) if k.endswith("_us")}
    assert time_keys and all(k.startswith("modeled") or k == "floor_us" for k in time_keys), time_keys
    assert all(c["modeling_seconds"] >= 0 for c in doc["cases"])  # host time, recorded not judged
    case = doc["cases"][0]
    assert case["cuda"]["kernels"][0]["registers_per_thread"] == 167  # from the report, not ptxas
    assert case["modeled_cuda_over_triton"] == pytest.approx(
        case["cuda"]["modeled_us"] / case["triton"]["modeled_us"]
    )
    kernels = sum(len(c["cuda"]["kernels"]) for c in doc["cases"])
    md = (out / "p.md").read_text()
    # a row per case, then a row per kernel: where its slowest CTA's time goes
    assert "modeled, not measured" in md and md.count("\n| ") == 1 + len(cases) + 1 + kernels
    assert "| case | kernel | modeled slowest CTA µs | prologue | main loop |" in md
    for k in (k for c in doc["cases"] for k in c["cuda"]["kernels"]):
        assert sum(k["modeled_slowest_cta_stages_us"].values()) == pytest.approx(k["modeled_slowest_cta_us"])
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_what_if_models_the_same_counters_under_a_constant_set_by_hand(inputs):
    """A slower issue rate can only lengthen the modeled time; the document says what was asked."""
    tmp, _ = inputs
    common = ["--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json")]
    assert _run(*common, "--json", str(tmp / "a.json")).exit_code == 0
    result = _run(*common, "--what-if", "issue_per_clk=0.5", "--json", str(tmp / "b.json"))
    assert result.exit_code == 0, result.output
    plain, asked = (json.loads((tmp / f).read_text()) for f in ("a.json", "b.json"))
    assert asked["calibration"].endswith("what-if issue_per_clk=0.5 (not measured)")
    assert asked["model_error"] == "not measured"
    times = [[c["cuda"]["modeled_us"] for c in d["cases"]] for d in (plain, asked)]
    assert all(b >= a for a, b in zip(*times, strict=True)) and times[1] != times[0]
    refused = _run(*common, "--what-if", "issue_per_clk=1", "--update-baseline", str(tmp / "base.json"))
    assert refused.exit_code == 2 and "neither writes nor judges a baseline" in refused.output
    assert not (tmp / "base.json").exists()
    bad = _run(*common, "--what-if", "issue_per_clk=zero")
    assert bad.exit_code == 2 and "--what-if: 'issue_per_clk=zero'" in bad.output


def test_counters_missing_a_case_name_the_file(inputs):
    tmp, cases = inputs
    doc = json.loads((tmp / "counters.json").read_text())
    doc.pop(cases[1].id)
    (tmp / "counters.json").write_text(json.dumps(doc))
    result = _run("--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json"))
    assert result.exit_code == 2
    assert "counters.json" in result.output and cases[1].id in result.output


def test_bad_counters_name_the_field(inputs):
    tmp, cases = inputs
    doc = json.loads((tmp / "counters.json").read_text())
    del doc[cases[0].id]["kernels"][0]["ctas"]
    (tmp / "counters.json").write_text(json.dumps(doc))
    result = _run("--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json"))
    assert result.exit_code == 2
    assert f"[{cases[0].id!r}].kernels[0].ctas: missing" in result.output


def test_counters_with_no_kernel_are_refused(inputs):
    """A launch of no kernel modeled as 0 µs and passed every gate."""
    tmp, cases = inputs
    doc = json.loads((tmp / "counters.json").read_text())
    doc[cases[0].id]["kernels"] = []
    (tmp / "counters.json").write_text(json.dumps(doc))
    result = _run("--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"counters.json: [{cases[0].id!r}].kernels: is empty: a launch runs at least one kernel" in (
        result.output
    )


@pytest.mark.parametrize("registers", [0, -1, 256, 1.5, "many"])
def test_registers_out_of_range_name_the_file_and_field(inputs, registers):
    """0 registers divided the occupancy model by zero (a traceback)."""
    tmp, _ = inputs
    report = json.loads((tmp / "regs.json").read_text())
    report[0]["kernels"][0]["registers"] = registers  # sm_120: the default GPU's
    (tmp / "regs.json").write_text(json.dumps(report))
    result = _run("--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "regs.json: [0].kernels[0].registers: " in result.output


def test_a_registers_report_whose_kernels_are_not_a_list_names_the_field(inputs):
    tmp, _ = inputs
    report = json.loads((tmp / "regs.json").read_text())
    report[0]["kernels"] = 5
    (tmp / "regs.json").write_text(json.dumps(report))
    result = _run("--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "regs.json: [0].kernels: must be a list of kernels" in result.output


@pytest.mark.parametrize("option", ["--max-modeled-regression", "--max-cuda-over-triton"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_limit_that_is_not_finite_is_refused(inputs, option, value):
    """NaN passes click's range check and then no regression could ever exceed it."""
    tmp, _ = inputs
    result = _run("--counters", str(tmp / "counters.json"), option, value)
    assert result.exit_code == 2 and f"Invalid value for '{option}': {value} is not a finite number" in (
        result.output
    )


@pytest.mark.parametrize(
    ("value", "reason"), [("0.5", "must be a whole number"), ("0", "not a positive number")]
)
def test_a_what_if_count_must_be_a_whole_positive_number(inputs, value, reason):
    """sms=0.5 became 0 SMs: a ZeroDivisionError."""
    tmp, _ = inputs
    common = ["--counters", str(tmp / "counters.json"), "--registers", str(tmp / "regs.json")]
    result = _run(*common, "--what-if", f"sms={value}")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--what-if" in result.output and reason in result.output


def _model_baseline(inputs, parity_results, **changes) -> tuple[list[str], str]:
    """A model baseline of the picked cases (written by profile itself), changed by hand."""
    tmp, _ = inputs
    common = [
        "--counters",
        str(tmp / "counters.json"),
        "--registers",
        str(tmp / "regs.json"),
        "--gpu",
        "h200",
    ]
    base = tmp / "base.json"
    result = _run(*common, "--update-baseline", str(base), "--parity-from", str(parity_results))
    assert result.exit_code == 0, result.output
    doc = json.loads(base.read_text())
    for key, value in changes.items():
        if key == "modeled_us":
            for entry in doc["cases"].values():
                entry[key] = value
        else:
            doc[key] = value
    base.write_text(json.dumps(doc))
    return common, str(base)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_model_baseline_of_nan_is_refused_not_passed(inputs, parity_results, value):
    """A NaN modeled time compared false with every limit: "no regression" against anything."""
    common, base = _model_baseline(inputs, parity_results, modeled_us=value)
    result = _run(*common, "--baseline", base)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "base.json: cases." in result.output and ".modeled_us: is " in result.output


def test_a_model_baseline_with_format_version_true_is_refused(inputs, parity_results):
    common, base = _model_baseline(inputs, parity_results, format_version=True)
    result = _run(*common, "--baseline", base)
    assert result.exit_code == 2 and "base.json: format_version: format_version 1 expected" in result.output


def test_a_calibration_label_is_printed_as_text_not_markup(inputs, parity_results):
    """The note quoting a baseline's calibration raised rich's MarkupError on "[/oops]"."""
    common, base = _model_baseline(inputs, parity_results, calibration="[/oops] [bold]x")
    result = _run(*common, "--baseline", base)
    assert result.exit_code == 0, result.output
    assert "'[/oops] [bold]x'" in result.output


def test_an_unwritable_output_is_refused_before_any_work(inputs, tmp_path):
    tmp, _ = inputs
    result = _run("--counters", str(tmp / "counters.json"), "--json", str(tmp_path))
    assert result.exit_code == 2 and "--json" in result.output


def test_an_unknown_gpu_is_a_usage_error():
    result = _run("--gpu", "a100")
    assert result.exit_code == 2


@pytest.mark.slow
def test_a_plan_sweep_models_the_plan_beside_its_neighbours(tmp_path):
    """--plan-sweep: the case modeled at every variant; the plan's own figure is the profile's, and the
    fastest neighbour is named with what it saves."""
    out = tmp_path / "p.json"
    result = CliRunner().invoke(
        cli, ["profile", SMOKE, "-k", "q1", "--no-sanitize", "--plan-sweep", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "the plan beside its neighbours" in result.output
    document = json.loads(out.read_text())
    (case,), (sweep,) = document["cases"], document["plan_sweep"]
    assert sweep["case"] == case["case"] and "CTAs of" in sweep["plan"]
    figures = sweep["modeled_us"]
    assert figures["plan"] == case["cuda"]["modeled_us"]  # the same emulated launch, the same model
    assert {"whole", "rows=32", "rows=48"} <= set(figures) and not sweep["refused"]
    # the plan runs its one row tile whole in 32 rows: those two variants are the same launch
    assert sweep["plan"] == "1 CTAs of 32 rows, whole row tiles"
    assert figures["whole"] == figures["plan"] == figures["rows=32"] != figures["rows=48"]
    assert 0.0 <= sweep["modeled_gain"] < 1.0


def test_a_plan_sweep_names_the_variants_the_plan_refuses(monkeypatch):
    from ddbench.gpus import gpu_spec
    from ddbench.kernel.plan import PlanOptions
    from ddbench.runner import model_plan_sweep
    from ddbench.runner.model_profiles import calibration_of

    def two(row_tiles, sms, **_):
        yield "plan", PlanOptions()
        yield "odd", PlanOptions(ctas=13, cluster=8)  # 13 CTAs do not divide into clusters of 8

    monkeypatch.setattr(model_plan_sweep, "plan_variants", two)
    (case,) = select_cases([load_suite_file(SMOKE)], "q1")
    gpu = gpu_spec("rtx-pro-6000")
    sweep = model_plan_sweep.sweep_plan(case, gpu, calibration_of(gpu), "graph", None)
    assert list(sweep.modeled_us) == ["plan"] and sweep.fastest == "plan" and sweep.gain == 0.0
    assert "do not divide into clusters of 8" in sweep.refused["odd"]


def test_a_plan_sweep_does_not_take_counters(inputs):
    tmp, _ = inputs
    result = _run("--counters", str(tmp / "counters.json"), "--plan-sweep")
    assert result.exit_code == 2 and "--plan-sweep" in result.output


def test_profile_refuses_a_case_its_counted_launch_cannot_fit_as_run_does(tmp_path):
    """The same estimate and refusal as `ddbench run`: exit 2 naming --max-memory, before any count."""
    suite = tmp_path / "huge.json"
    suite.write_text(
        '{"name": "huge", "cases": [{"model": "kimi-k2.6", "layout": {"tp": 8}, "prefix": 1000000, '
        '"batch_size": 64, "tree": {"kind": "chain", "length": 4}, "backends": ["reference", "cuda-emu"], '
        '"parity": [{"candidate": "cuda-emu", "against": "reference", "max_row_ulp": 4.0}]}]}'
    )
    result = CliRunner().invoke(cli, ["profile", str(suite)])
    assert result.exit_code == 2 and "--max-memory" in result.output
    assert "estimated peak memory" in result.output
    small = _run("--max-memory", "0.001")
    assert small.exit_code == 2 and "exceeds the limit 1.0 MB" in small.output, small.output


def test_a_baseline_of_another_gpu_is_refused_before_any_case_is_counted():
    h200 = str(Path(__file__).resolve().parents[1] / "baselines" / "model-h200" / "smoke.json")
    result = _run("--gpu", "rtx-pro-6000", "--baseline", h200)
    assert result.exit_code == 2 and "gpu: a baseline for 'h200', not 'rtx-pro-6000'" in result.output
    assert "modeled " not in result.output  # no case was counted first

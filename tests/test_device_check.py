"""The device script's CPU-side parts: case selections, the no-GPU answer, the emulated fragment probe."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from ddbench.device import check, latency
from ddbench.device.cases import suite_cases
from ddbench.device.fragments import compare, random_probe_data, run_emulated
from ddbench.runner.roles import Role, roles_in


@pytest.mark.parametrize(
    ("path", "expression"),
    [
        *check.PARITY_SUITES,
        *[(check.SANITIZER_CASES[0], e) for e in check.SANITIZER_CASES[1:]],
        *[(path, e) for path, e, _ in latency.LATENCY_CASES],
    ],
)
def test_every_selection_finds_cases(path, expression):
    assert suite_cases(path, expression or None), f"{path} -k {expression!r} selects nothing"


def test_every_latency_case_judges_both_kernels_it_times():
    """A timed backend no bound judges is refused by the Session: the table would lose its triton column."""
    cases = latency.latency_cases()
    assert len(cases) == 13 and len({c.id for _, c in cases}) == 13
    for path, case in cases:
        roles = roles_in(case, check._gpu_backends(path))
        assert roles["cuda"] is Role.CANDIDATE and roles["triton"] is Role.CANDIDATE, (case.id, roles)


def test_latency_covers_issue_11s_target_shapes():
    ids = {c.id for path, c in latency.latency_cases() if path == "suites/model-report.json"}
    assert len(ids) == 9 and any("deepseek-v3-tp8-h16-bs4-p4096-ddtree-b64" in i for i in ids)


def test_gpu_subset_is_gpu_sized_and_bounded():
    cases = suite_cases(*check.PARITY_SUITES[2])
    assert 8 <= len(cases) <= 40
    assert all("gpu" in c.tags and max(c.prefix_lens) >= 4096 for c in cases)


def test_emulation_is_swapped_for_the_hardware_kernel():
    names = check._gpu_backends("suites/smoke.json")
    assert "cuda" in names and "cuda-emu" not in names and "triton" in names


@pytest.mark.parametrize(
    "path", sorted({p for p, _ in check.PARITY_SUITES} | {p for p, _, _ in latency.LATENCY_CASES})
)
def test_every_device_session_names_only_known_backends(path):
    """The Session the device check builds for a suite (on the CPU here: the hardware kernel unavailable)."""
    from ddbench.runner import Session, SessionOptions

    options = SessionOptions(
        suites=(path,), backends=check._gpu_backends(path), device="cpu", skip_unavailable=True
    )
    session = Session(options)
    assert set(session.unavailable) <= {"cuda"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without a GPU")
def test_without_a_gpu_it_says_unavailable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert check.main() == 3
    report = json.loads((tmp_path / "device-check.json").read_text())
    assert "no CUDA GPU" in report["unavailable"]
    assert "unavailable" in capsys.readouterr().out


def _bf16_pairs(words: torch.Tensor) -> torch.Tensor:
    """(…, n) uint32 words -> (…, n, 2) floats: low half first."""
    return words.contiguous().view(torch.bfloat16).float().view(*words.shape, 2)


def test_emulated_probe_matches_the_ptx_layouts():
    data = random_probe_data(trials=3, seed=5)
    out = run_emulated(data)
    for t in range(data.trials):
        a, b = _bf16_pairs(data.a[t]), _bf16_pairs(data.b[t])
        A, B, C = torch.zeros(16, 16), torch.zeros(16, 8), torch.zeros(16, 8)
        for lane in range(32):
            g, k = lane // 4, lane % 4
            for reg, (row, col) in enumerate(
                ((g, 2 * k), (g + 8, 2 * k), (g, 2 * k + 8), (g + 8, 2 * k + 8))
            ):
                A[row, col : col + 2] = a[lane, reg]
            for reg, row in enumerate((2 * k, 2 * k + 8)):
                B[row : row + 2, g] = b[lane, reg]
            C[g, 2 * k : 2 * k + 2] = data.c[t, lane, :2]
            C[g + 8, 2 * k : 2 * k + 2] = data.c[t, lane, 2:]
        D = (A.double() @ B.double() + C.double()).float()
        for lane in range(32):
            g, k = lane // 4, lane % 4
            expected = torch.stack([D[g, 2 * k], D[g, 2 * k + 1], D[g + 8, 2 * k], D[g + 8, 2 * k + 1]])
            torch.testing.assert_close(out.d[t, lane], expected, rtol=1e-5, atol=1e-4)
        tiles = data.tiles[t].view(torch.bfloat16).float()  # (4, 8, 8)
        got = _bf16_pairs(out.ldm[t])
        got_t = _bf16_pairs(out.ldm_trans[t])
        for lane in range(32):
            row, col = lane // 4, 2 * (lane % 4)
            for m in range(4):
                assert torch.equal(got[lane, m], tiles[m, row, col : col + 2])
                assert torch.equal(got_t[lane, m], tiles[m].T[row, col : col + 2])
        for lane in range(32):
            for i in range(5):
                assert out.shuffled[t, lane, i] == data.values[t, lane ^ (1 << i)]
        v = data.values[t]
        halves = out.packed[t].contiguous().view(torch.float16).view(32, 3, 2)
        assert torch.equal(halves[:, 0, 0], (v * 3).half()) and torch.equal(
            halves[:, 0, 1], (v * -0.01).half()
        )
        assert torch.equal(halves[:, 1, 0], (v * 70000).half()) and torch.equal(
            halves[:, 1, 1], (v * 1e-6).half()
        )
        bf = out.packed[t, :, 2].contiguous().view(torch.bfloat16).view(32, 2)
        assert torch.equal(bf[:, 0], v.bfloat16()) and torch.equal(bf[:, 1], (v * 1e-30).bfloat16())
        assert torch.equal(out.widened[t], halves[:, 0].float())


def test_compare_flags_a_wrong_hardware_result():
    data = random_probe_data(trials=2, seed=6)
    emulated = run_emulated(data)
    assert compare(data, emulated, emulated)["ok"]
    broken = run_emulated(data)
    broken.ldm_trans = broken.ldm.clone()
    broken.d = broken.d * 1.001
    report = compare(data, emulated, broken)
    assert not report["ok"] and report["ldmatrix_trans_mismatches"] > 0 and report["mma_max_fp32_ulp"] > 4
    swapped = run_emulated(data)
    swapped.packed = (
        swapped.packed.view(torch.int16)
        .view(*swapped.packed.shape, 2)
        .flip(-1)
        .reshape(swapped.packed.shape[0], 32, -1)
        .view(torch.int32)
    )  # cvt operands the other way round
    report = compare(data, emulated, swapped)
    assert not report["ok"] and report["conversion_mismatches"] > 0 and report["shfl_mismatches"] == 0


def test_device_names_map_to_the_models_gpu_tables():
    from ddbench.gpus import gpu_key_of_device

    assert gpu_key_of_device("NVIDIA H200") == "h200"
    assert gpu_key_of_device("NVIDIA RTX PRO 6000 Blackwell Workstation Edition") == "rtx-pro-6000"
    assert gpu_key_of_device("NVIDIA GeForce RTX 5090") == "rtx-5090"
    assert gpu_key_of_device("NVIDIA A100-SXM4-80GB") is None


@pytest.mark.slow
def test_calibration_step_writes_the_models_measured_error(tmp_path, monkeypatch):
    """The GPU-only step with the GPU faked: a measured time in, the committed format out, read back."""
    from ddbench.model.calibration import calibration_for

    case = latency.latency_cases()[0][1]
    monkeypatch.setattr(check.torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    row = {"case": case.id, "cold_status": "pass", "cold_cuda_median_us": 12.5, "cold_triton_median_us": 30.0}
    failed = {**row, "case": latency.latency_cases()[1][1].id, "cold_status": "fail"}  # no datum: not fitted
    result = check.step_calibration(tmp_path, {"rows": [row, failed]})
    assert result["ok"] and result["gpu"] == "h200"
    assert result["uncalibrated_modeled_us"][case.id] > 0
    assert result["issue_counted"] in (["sass"], ["ratio"])  # said, so a fit by ratio is redone before use
    (triton,) = result["triton_errors"]  # one case: the fitted scale makes the Triton model meet it
    assert triton["measured_us"] == 30.0 and triton["modeled_us"] == pytest.approx(30.0, rel=1e-3)
    document = json.loads((tmp_path / "calibration.json").read_text())
    calibration = calibration_for(document, "h200", "calibration.json")
    (error,) = calibration.errors
    assert error.case == case.id and error.measured_us == 12.5 and error.modeled_us > 0
    assert (
        set(calibration.constants)
        <= {
            "dram_latency_us",
            "l2_latency_us",
            "l2_gbs",
            "graph_node_us",
            "issue_per_clk",
            "triton_time_scale",
        }
        and "triton_time_scale" in calibration.constants
    )
    assert (
        calibration.label.startswith("measured on NVIDIA H200")
        and "over 1 measured cases" in calibration.error_band
    )
    assert calibration_for(document, "rtx-pro-6000", "x").label.startswith("uncalibrated")


def test_calibration_step_refuses_a_gpu_the_model_has_no_table_for(tmp_path, monkeypatch):
    monkeypatch.setattr(check.torch.cuda, "get_device_name", lambda *a: "NVIDIA A100")
    result = check.step_calibration(tmp_path, {"rows": []})
    assert result["ok"] is False and "no table for NVIDIA A100" in result["unavailable"]


def test_fitting_the_estimated_constants_lowers_the_misfit():
    import dataclasses

    from ddbench.gpus import gpu_spec
    from ddbench.model.calibration import fit_constants

    gpu = gpu_spec("h200")

    def model(spec):  # a fake model: one case bound by L2 latency, one by DRAM latency
        return [
            10.0 * spec.l2_latency_us / gpu.l2_latency_us,
            20.0 * spec.dram_latency_us / gpu.dram_latency_us,
        ]

    fitted = fit_constants(gpu, [15.0, 20.0], model)
    assert fitted == {"l2_latency_us": gpu.l2_latency_us * 1.5}
    assert model(dataclasses.replace(gpu, **fitted)) == pytest.approx([15.0, 20.0])
    assert fit_constants(gpu, [10.0, 20.0], model) == {}  # nothing to fit: the datasheet values stay


def test_mma_is_judged_in_ulps_of_its_terms_not_of_a_cancelled_result():
    """A tensor core that sums exactly and rounds once differs from the emulation's running fp32 sum by
    many ULPs of a result near zero, and by about one of the terms' scale: it must pass."""
    from ddbench.device.fragments import as_d_fragments, mma_operands

    data = random_probe_data(trials=64, seed=9)
    emulated = run_emulated(data)
    A, B, C = mma_operands(data)
    exact = dataclasses.replace(emulated, d=as_d_fragments(A @ B + C).float())
    report = compare(data, emulated, exact)
    assert report["mma_max_result_ulp"] > 4 * report["mma_max_fp32_ulp"]  # cancellations happen
    assert report["ok"] and 0 < report["mma_max_fp32_ulp"] <= 2


def test_both_sanitizer_summaries_are_read():
    """As compute-sanitizer printed them on the H200 (racecheck has its own summary line)."""
    assert check.sanitizer_errors("========= ERROR SUMMARY: 0 errors\n") == [0]
    assert check.sanitizer_errors("========= ERROR SUMMARY: 3 errors\n") == [3]
    racecheck = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert check.sanitizer_errors(racecheck) == [0]
    assert check.sanitizer_errors(racecheck.replace("(0 errors", "(2 errors")) == [2]
    assert check.sanitizer_errors("q1: finite=True\n") == []


def test_ncu_step_profiles_then_exports_each_page_into_one_zip(tmp_path, monkeypatch):
    """ncu faked by a script that logs its arguments: a profile run, then one import per page."""
    import zipfile

    from ddbench.device import ncu

    log = tmp_path / "calls"
    fake = tmp_path / "ncu"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\necho "page,$5"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(ncu, "find_cuda_tool", lambda name: str(fake) if name == "ncu" else None)
    out = tmp_path / "out"
    out.mkdir()
    result = ncu.step_ncu(out, "suites/model-report.json", ["a", "b"], seconds=30)
    assert result["ok"], result
    calls = log.read_text().splitlines()
    assert len(calls) == 4 and "--clock-control none" in calls[0] and calls[0].endswith("a b")
    assert all("--import" in c for c in calls[1:])
    with zipfile.ZipFile(out / "ncu.zip") as bundled:
        assert sorted(bundled.namelist()) == ["ncu-details.csv", "ncu-raw.csv", "ncu-source.csv"]
        assert bundled.read("ncu-raw.csv").decode().strip() == "page,raw"
    assert sorted(p.name for p in out.iterdir()) == ["ncu.zip"]


def test_an_unknown_step_is_refused_before_anything_runs(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(check, "STEPS", "latency,nope")
    monkeypatch.setattr(check, "step_build", lambda: pytest.fail("a step ran"))
    assert check.main() == 2
    assert "unknown steps ['nope']" in capsys.readouterr().out and not list(tmp_path.iterdir())


def test_the_offline_calibration_refuses_what_is_not_a_device_report(tmp_path, capsys):
    from ddbench.device.calibrate import main as calibrate_main

    assert calibrate_main([str(tmp_path / "missing.json")]) == 2
    (tmp_path / "r.json").write_text(json.dumps({"environment": {"device": {"name": "NVIDIA H200"}}}))
    assert calibrate_main([str(tmp_path / "r.json")]) == 2
    assert "not a device check's report with latency rows" in capsys.readouterr().err
    assert calibrate_main([]) == 2


def test_the_sweep_tries_the_plan_beside_other_splits_within_four_waves():
    from ddbench.device.plan_sweep import variants

    named = {name: backend.forced for name, backend in variants(row_tiles=2, sms=132)}
    assert list(named)[:2] == ["plan", "whole"] and named["whole"].whole_row_tiles is True
    counts = sorted(b.ctas for n, b in named.items() if n.startswith("ctas=") and b.cluster is None)
    assert counts == [4, 8, 16, 32, 64, 132, 264]  # the row tiles' multiples, one and two waves; none > 4
    assert named["rows=32"].row_groups == 2 and named["rows=48"].row_groups == 3
    assert (named["ctas=128,cluster=8"].ctas, named["ctas=128,cluster=8"].cluster) == (128, 8)
    assert not any("cluster" in n for n in variants(row_tiles=32, sms=132))  # 8 x 32 CTAs > a wave


def test_a_latency_row_names_the_checks_that_failed():
    """A FAIL in the device report says why: the budget's failed checks and the failing parity pairs."""
    from ddbench.metrics.latency_verdict import BudgetCheck, LatencyVerdict
    from ddbench.metrics.verdict import FAIL, PASS, Verdict
    from ddbench.results.case_result import CaseResult, PairResult
    from ddbench.results.case_timing import CaseTiming
    from ddbench.suite.budget import Budget
    from ddbench.suite.model import ParityBound
    from ddbench.timing.measurement import Measurement

    case = suite_cases("suites/smoke.json", None)[0]
    slow = BudgetCheck("regression", "cuda", FAIL, 0.34, 0.05, "18.24 us vs baseline 13.63 us")
    fine = BudgetCheck("regression", "triton", PASS, 0.01, 0.05, "within")
    timing = CaseTiming(
        Budget(),
        {"cuda": Measurement("cuda", "graph", "cuda-events", [18.0, 18.5, 18.2], "max-samples")},
        [],
        LatencyVerdict(FAIL, (slow, fine)),
    )
    bound = ParityBound("cuda", "triton", (("max_row_ulp", 4.0),))
    pairs = [PairResult("cuda", "triton", bound, Verdict(FAIL, ("max_row_ulp 9 > 4",)))]
    row = latency.latency_figures(CaseResult(case, pairs=pairs, timing=timing), "cold_")
    assert row["cold_status"] == FAIL
    assert row["cold_failed"] == [
        "regression cuda: 18.24 us vs baseline 13.63 us",
        "cuda vs triton: max_row_ulp 9 > 4",
    ]
    passing = latency.latency_figures(
        CaseResult(case, timing=dataclasses.replace(timing, verdict=LatencyVerdict(PASS, (fine,))))
    )
    assert "failed" not in passing


@pytest.mark.slow
def test_the_e2e_step_runs_the_generation_cases_and_says_why_no_server_ran(tmp_path, monkeypatch):
    """On the CPU, with the emulation in the hardware kernel's place: the same step the GPU runs."""
    from ddbench.device.e2e import SERVER_MODEL_ENV, _server_parity, step_e2e
    from ddbench.runner import Session, SessionOptions

    monkeypatch.delenv(SERVER_MODEL_ENV, raising=False)
    picked = []

    def cpu_session(path, expression):
        picked.append((path, expression))
        options = SessionOptions(
            suites=(path,), filter_expr="ddtree8", backends=("reference-fp64", "cuda-emu")
        )
        return Session(options)

    result = step_e2e(tmp_path, 300, cpu_session)
    assert picked == [("suites/e2e.json", "gpu")]
    (case,) = result["cases"].values()
    assert case["status"] == "pass" and case["pairs"]["cuda-emu vs reference-fp64"]["accept_length"] == "pass"
    assert result["ok"] and "DDBENCH_SERVER_MODEL" in result["server_parity"]["skipped"]
    assert (tmp_path / "e2e-gpu.json").is_file()
    monkeypatch.setenv(SERVER_MODEL_ENV, str(tmp_path / "no-such-model"))
    server = _server_parity(tmp_path, time.perf_counter() + 60)
    assert server["status"] == "error" and "no such folder" in server["reasons"][0]

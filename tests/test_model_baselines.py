"""CI gate: the kernel's exact counters and modeled times against the committed model baselines.

A kernel change that adds DRAM or L2 traffic, bank conflicts or waves, or slows the modeled time past the
tolerance, fails CI on a CPU-only machine (`make test-slow`: every case of two suites, counted and
modeled) unless the same commit updates
`baselines/model-<gpu>/<suite>.json` (`ddbench baseline update SUITE --model GPU`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
# The CPU-sized suites are gated here; the 600 GPU-sized k26-verify cases (minutes to model) are compared
# with `ddbench baseline diff` when the kernel changes (docs/model.md).
GATED = ("smoke", "kernel-parity")
BASELINES = sorted(p for p in (ROOT / "baselines").glob("model-*/*.json") if p.stem in GATED)


def _profile(suite: str, gpu: str, baseline: Path):
    """The RTX PRO 6000 runs also sanitize every counted launch (racecheck, memcheck): a finding fails CI."""
    suite_file = str(ROOT / "suites" / f"{suite}.json")
    sanitize = "--sanitize" if gpu == "rtx-pro-6000" else "--no-sanitize"
    args = ["profile", suite_file, "--gpu", gpu, "--baseline", str(baseline), sanitize]
    return CliRunner().invoke(cli, args)


def test_model_baselines_are_committed_for_the_target_gpus():
    names = {(p.parent.name, p.stem) for p in BASELINES}
    for gpu in ("model-rtx-pro-6000", "model-h200"):
        assert {(gpu, "smoke"), (gpu, "kernel-parity")} <= names


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="registers per thread come from nvcc's ptxas")
@pytest.mark.parametrize("baseline", BASELINES, ids=[f"{p.parent.name}/{p.stem}" for p in BASELINES])
def test_the_kernel_does_not_regress_against_its_model_baseline(baseline):
    result = _profile(baseline.stem, baseline.parent.name.removeprefix("model-"), baseline)
    assert result.exit_code == 0, result.output[-3000:]
    assert "model baseline: no regression" in result.output
    # the modeled times too, not only the counters: the same calibration and count of the issue term (the
    # SASS, where nvcc builds the kernels: a missing nvdisasm or scipy must not turn the gate off quietly)
    assert "modeled times not compared" not in result.output, result.output[-2000:]
    if baseline.parent.name == "model-rtx-pro-6000":
        assert " cases clean (racecheck, memcheck)" in result.output


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="registers per thread come from nvcc's ptxas")
def test_the_gate_fails_when_the_kernel_reads_more_than_its_baseline(tmp_path):
    source = ROOT / "baselines" / "model-rtx-pro-6000" / "smoke.json"
    document = json.loads(source.read_text())
    first = next(iter(document["cases"].values()))
    first["unique_dram_bytes"] = first["unique_dram_bytes"] // 2  # as if the kernel used to read half
    tampered = tmp_path / "smoke.json"
    tampered.write_text(json.dumps(document))
    result = _profile("smoke", "rtx-pro-6000", tampered)
    assert result.exit_code == 1 and "REGRESSED" in result.output

"""The pytest plugin end to end: pytest runs in a subprocess on a tiny suite, as a user would run it.

Twice with pytest-benchmark's storage (autosave, then compare with a fail threshold), once with a plug-in
backend that fails parity and one that is unavailable, once with a bad suite, and once without the option
(the plugin must then add nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = {
    "name": "plugin",
    "defaults": {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "tree": {"kind": "chain", "length": 2},
        "parity": [{"candidate": "*", "against": "reference-fp64", "max_row_ulp": 3.0}],
        "tags": ["cpu", "tiny"],
    },
    "cases": [{"label": "one", "prefix": 7}, {"label": "two", "prefix": 19}],
}

PLUGINS = """
import torch
from ddbench.backends import Availability
from ddbench.backends.reference import ReferenceBackend


class Scaled:
    name = "scaled"

    def availability(self):
        return Availability.yes("test")

    def run(self, inputs):
        return (ReferenceBackend().run(inputs) * 1.05).to(torch.bfloat16)


class Ones(Scaled):
    name = "ones"

    def run(self, inputs):
        inputs.o_extend.fill_(1.0)
        return inputs.o_extend


class Missing(Scaled):
    name = "missing"

    def availability(self):
        return Availability.no("needs a GPU")
"""

REFERENCE_BOUND = {"candidate": "reference", "against": "reference-fp64", "max_row_ulp": 3.0}
MACHINE_KEYS = {"device_key", "gpu", "gpu_driver", "cuda", "torch", "triton", "sglang"}
EXTRA_KEYS = {"case_id", "backend", "workload_hash", "q_len", "heads", "prefix_lens"}


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "suite.json").write_text(json.dumps(SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "ddbench_test_plugin_backends.py").write_text(PLUGINS)
    return tmp_path


def pytest_run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A fresh pytest: none of this run's PYTEST_* variables (under xdist, PYTEST_XDIST_WORKER would make
    # pytest-benchmark disable itself), and one thread for steadier timings.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(workdir)}
    command = [sys.executable, "-m", "pytest", "-c", str(workdir / "pytest.ini"), "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_benchmarks_save_and_compare(workdir):
    storage = f"file://{workdir / 'store'}"
    common = ["--ddbench-suite", "suite.json", "--ddbench-backends", "reference,reference-fp64"]
    common += [
        "-k",
        "one",
        "--ddbench-rounds",
        "5",
        "--ddbench-warmup",
        "1",
        f"--benchmark-storage={storage}",
    ]
    first = pytest_run(workdir, *common, "--benchmark-autosave")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 passed, 2 deselected" in first.stdout
    assert len(list((workdir / "store").rglob("*.json"))) == 1

    out = workdir / "bench.json"
    compare = ["--benchmark-compare", "--benchmark-compare-fail=min:10000%", f"--benchmark-json={out}"]
    second = pytest_run(workdir, *common, *compare)
    assert second.returncode == 0, second.stdout + second.stderr
    document = json.loads(out.read_text())
    facts = document["machine_info"]["ddbench"]
    assert set(facts) >= MACHINE_KEYS
    assert facts["device_key"].startswith("cpu-") and facts["gpu"] is None and facts["torch"]
    names = sorted(b["name"] for b in document["benchmarks"])
    assert len(names) == 2
    assert all(n.startswith("test_ddbench_case[one.kimi-k2.6-tp8-h8-bs1-p7-chain2-") for n in names)
    assert {n.rsplit("-", 1)[-1] for n in names} == {"reference]", "fp64]"}
    for bench in document["benchmarks"]:
        assert bench["fullname"].startswith("ddbench-suite::test_ddbench_case[")
        assert set(bench["extra_info"]) >= EXTRA_KEYS
        assert bench["group"] == bench["extra_info"]["case_id"]
        assert bench["stats"]["rounds"] == 5
        assert bench["extra_info"]["heads"] == 8 and bench["extra_info"]["q_len"] == 2


@pytest.mark.slow
def test_parity_failure_fails_the_test_and_unavailable_backends_skip(workdir):
    backends = (
        "reference,reference-fp64,ddbench_test_plugin_backends:Scaled,ddbench_test_plugin_backends:Missing"
    )
    run = pytest_run(
        workdir, "--ddbench-suite", "suite.json", "--ddbench-backends", backends, "-k", "one and tiny", "-rfs"
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "1 failed, 2 passed, 1 skipped, 4 deselected" in output
    assert "parity: scaled vs reference-fp64: fail (max_row_ulp" in output
    assert "missing: unavailable: needs a GPU" in output


def test_bad_suite_is_a_usage_error(workdir):
    (workdir / "bad.json").write_text('{"name": "bad", "cases": [{"tree": {"kind": "chain"}}]}')
    run = pytest_run(workdir, "--ddbench-suite", "bad.json")
    assert run.returncode == 2  # ddbench's bad-input exit code, as `ddbench run` gives
    assert "--ddbench-suite: bad.json" in run.stderr


def test_without_the_option_the_plugin_adds_nothing(workdir):
    (workdir / "test_plain.py").write_text("def test_plain():\n    pass\n")
    run = pytest_run(workdir, "--collect-only", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_plain.py::test_plain" in run.stdout
    assert "ddbench" not in run.stdout and "1 test collected" in run.stdout


def test_a_backend_no_bound_judges_stops_pytest_with_exit_2(workdir):
    """The false green: `--ddbench-backends reference,mykern:Wrong` used to PASS a kernel returning ones."""
    (workdir / "judged.json").write_text(
        json.dumps({**SUITE, "defaults": {**SUITE["defaults"], "parity": [REFERENCE_BOUND]}})
    )
    backends = "reference,reference-fp64,ddbench_test_plugin_backends:Ones"
    refused = pytest_run(workdir, "--ddbench-suite", "judged.json", "--ddbench-backends", backends)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "ones" in refused.stderr and "no parity bound" in refused.stderr
    judged = pytest_run(
        workdir, "--ddbench-suite", "judged.json", "--ddbench-backends", backends, "--ddbench-as", "reference"
    )
    assert judged.returncode == 1 and "2 failed, 4 passed" in judged.stdout, judged.stdout


@pytest.mark.slow
def test_xdist_spreads_the_suite_and_merges_one_results_file(workdir):
    out = workdir / "parity.json"
    args = ["-n", "2", "--ddbench-suite", "suite.json", "--ddbench-backends", "reference,reference-fp64"]
    run = pytest_run(workdir, *args, "--ddbench-json", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout
    document = json.loads(out.read_text())
    assert document["complete"] is True and document["summary"] == {"pass": 2}
    assert sorted(c["id"].split(".")[0] for c in document["cases"]) == ["one", "two"]
    assert len(document["shards"]) == 2  # one part per worker, merged; the parts are gone
    assert not list(workdir.glob("parity.json.gw*"))


@pytest.mark.slow
def test_a_reference_only_backend_nothing_is_compared_against_is_skipped_not_passed(workdir):
    (workdir / "judged.json").write_text(
        json.dumps({**SUITE, "defaults": {**SUITE["defaults"], "parity": [REFERENCE_BOUND]}})
    )
    backends = "reference,reference-fp64,ddbench_test_plugin_backends:Ones"
    run = pytest_run(
        workdir,
        "--ddbench-suite",
        "judged.json",
        "--ddbench-backends",
        backends,
        "--ddbench-reference-only",
        "ones",
        "-k",
        "one",
        "-rs",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed, 2 skipped" in run.stdout  # -k one also selects case two's `ones` test
    assert "ones: reference only, and no candidate here is compared against it" in run.stdout

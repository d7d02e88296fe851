"""Suite cases that replay captured calls: expansion, IDs, errors naming the file, Triton replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddbench.backends import get_backend
from ddbench.cli.main import cli
from ddbench.errors import InputError
from ddbench.inputs import generate_inputs
from ddbench.inputs.suite_file import load_suite_file
from ddbench.metrics import parity_figures
from ddbench.metrics.ulp import lattice_ulps
from ddbench.suite import parse_suite
from ddbench.suite.from_json import case_from_json

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "suites" / "captures"


def _suite(tmp_path: Path, capture: str, **fields) -> Path:
    document = {
        "name": "replay-test",
        "defaults": {
            "backends": ["reference-fp64", "captured"],
            "parity": [{"candidate": "captured", "against": "reference-fp64", "max_row_ulp": 3.0}],
        },
        "cases": [{"capture": capture, **fields}],
    }
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def captures(tmp_path) -> Path:
    folder = tmp_path / "caps"
    shutil.copytree(CAPTURES, folder)
    return folder


def test_a_folder_becomes_one_case_per_capture_with_stable_ids(tmp_path, captures):
    suite = load_suite_file(_suite(tmp_path, "caps"))
    files = sorted(p.name.removesuffix(".safetensors") for p in captures.iterdir())
    assert [c.id.rsplit("-", 1)[0] for c in suite.cases] == [f"capture-{f}" for f in files]
    again = load_suite_file(_suite(tmp_path, "caps"))
    assert [c.id for c in again.cases] == [c.id for c in suite.cases]
    shipped = load_suite_file(ROOT / "suites" / "replay.json")
    assert sorted(c.id for c in shipped.cases) == sorted(c.id for c in suite.cases)  # content, not path


def test_the_case_describes_the_capture(tmp_path, captures):
    (case,) = [c for c in load_suite_file(_suite(tmp_path, "caps")).cases if "eagle" in c.id]
    assert case.batch_size == 2 and case.heads_per_rank == 8 and case.capture is not None
    assert case.model.sm_scale == pytest.approx(0.14468, abs=1e-5)
    x = generate_inputs(case)
    assert x.captured_output is not None and list(x.prefix_lens) == list(case.prefix_lens)


def test_changing_a_capture_changes_its_id(tmp_path, captures):
    name = sorted(captures.iterdir())[0]
    before = load_suite_file(_suite(tmp_path, f"caps/{name.name}")).cases[0].id
    data = bytearray(name.read_bytes())
    other = tmp_path / "caps2"
    other.mkdir()
    shutil.copy(sorted(captures.iterdir())[1], other / name.name)  # same file name, other content
    after = load_suite_file(_suite(tmp_path, f"caps2/{name.name}")).cases[0].id
    assert before != after and len(data) > 0


def test_replay_reproduces_the_captured_triton_output(tmp_path, captures):
    """The shipped captures were recorded on another CPU: a rounding step on a few elements (the
    interpreter's fp32 sums follow the CPU's vector width); a same-machine capture replays bit for bit
    (tests/test_capture.py)."""
    triton = get_backend("triton")
    for case in load_suite_file(_suite(tmp_path, "caps")).cases:
        x = generate_inputs(case)
        x.fresh_output()
        out = triton.run(x)
        moved = float((lattice_ulps(out, x.captured_output) > 0).float().mean())
        assert moved < 0.01 and parity_figures(out, x.captured_output).max_row_ulp <= 1.0, case.id


def test_a_corrupt_capture_is_an_error_naming_the_file_and_the_suite_field(tmp_path, captures):
    victim = sorted(captures.iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:1000])  # truncated
    result = CliRunner().invoke(cli, ["validate", str(_suite(tmp_path, "caps"))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert victim.name in result.output and "cases[0].capture" in result.output


def test_a_missing_capture_is_an_error(tmp_path):
    with pytest.raises(InputError, match="nothing-here"):
        load_suite_file(_suite(tmp_path, "nothing-here.safetensors"))


def test_captures_need_a_suite_file(tmp_path):
    with pytest.raises(InputError, match="suite files only"):
        parse_suite({"name": "x", "cases": [{"capture": "caps"}]}, "inline")


def test_a_replayed_case_round_trips_through_results_json(tmp_path, captures):
    case = load_suite_file(_suite(tmp_path, "caps")).cases[0]
    again = case_from_json(json.loads(json.dumps(case.to_json())))
    assert again.id == case.id and again.capture == case.capture


def test_the_captured_backend_refuses_synthetic_inputs():
    case = load_suite_file(ROOT / "suites" / "k26-tp8-parity.json").cases[0]
    with pytest.raises(ValueError, match="not a replayed capture"):
        get_backend("captured").run(generate_inputs(case))

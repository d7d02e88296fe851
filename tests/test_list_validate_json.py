"""`list --json` / the estimate column, `validate --json`, and NO_COLOR winning over FORCE_COLOR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SMOKE

from ddbench.cli.common import colour_settings
from ddbench.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
ESCAPE = "\x1b["


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_list_json_holds_every_selected_case_with_its_estimate():
    ids = invoke("list", SMOKE, "-k", "ragged or dsv3", "--ids").output.split()
    result = invoke("list", SMOKE, "-k", "ragged or dsv3", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [c["id"] for c in document["cases"]] == ids and len(ids) == 2
    assert document["device"] == "cpu" and document["suites"][0]["name"] == "smoke"
    for case in document["cases"]:
        estimate = case["estimate"]
        assert estimate["label"] == "estimate" and estimate["device"] == "cpu"
        assert estimate["bytes"] > 0 and estimate["seconds"] > 0
        assert case["backends"] == ["reference", "reference-fp64", "triton", "cuda-emu"]


def test_list_table_has_an_estimate_column():
    result = invoke("list", SMOKE, "-k", "dsv3", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "estimate (cpu)" in result.output
    row = next(line for line in result.output.splitlines() if "dsv3." in line)
    assert " MB, ~" in row and row.rstrip().endswith("│")


def test_validate_json_reports_each_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"name": "bad", "cases": [{"model": "nope", "tree": {"kind": "chain", "length": 4}}]})
    )
    result = invoke("validate", SMOKE, bad, "--json")
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False
    good, broken = document["files"]
    assert good == {"path": str(SMOKE), "ok": True, "suite": "smoke", "cases": 22}
    assert broken["ok"] is False and broken["path"] == str(bad)
    paths = {e["path"] for e in broken["errors"]}
    assert "cases[0].model" in paths
    for error in broken["errors"]:
        assert error["file"] == str(bad) and error["reason"] and error["message"].startswith(str(bad))


def test_validate_json_all_ok_exits_zero():
    result = invoke("validate", SMOKE, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["ok"] is True


def test_no_color_wins_over_force_color_in_the_settings():
    assert colour_settings({"NO_COLOR": "1", "FORCE_COLOR": "1"}) == {"color_system": None}
    assert colour_settings({"NO_COLOR": "", "FORCE_COLOR": "1"}) == {}  # empty NO_COLOR: not set
    assert colour_settings({}) == {}


def _list_output(**env: str) -> str:
    """`ddbench list` in a fresh process: the consoles read the environment when the CLI starts."""
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    clean["PYTHONPATH"] = str(REPO)
    code = "import sys; from ddbench.cli.main import main; sys.argv = ['ddbench', *sys.argv[1:]]; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "list", str(SMOKE), "-k", "dsv3", "--device", "cpu"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_no_color_and_force_color_together_print_no_escape_codes():
    assert ESCAPE in _list_output(FORCE_COLOR="1")  # the check below can fail: colour is forced here
    assert ESCAPE not in _list_output(FORCE_COLOR="1", NO_COLOR="1")

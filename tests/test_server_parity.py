"""`ddbench server-parity`: the two-server run, its gates and its refusals.

A real SGLang server needs a GPU and SGLang's serving stack, which CI has neither of: on this machine the
command must say so (exit 3) and start nothing. The run itself (start, wait, generate, stop, read the
plugin's log, judge) is exercised against tests/fake_sglang_server.py, a stand-in with SGLang's routes and
answer shapes that writes the plugin's real log lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddbench.errors import InputError
from ddbench.runner.server_parity import (
    DEFAULT_PROMPTS,
    ServerParityRequest,
    check_server_args,
    run_server_parity,
    server_argv,
    server_env,
)
from ddbench.runner.sglang_server import SglangServer

FAKE = Path(__file__).with_name("fake_sglang_server.py")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "deepseek_v2"}')
    return folder


def fake_launch(argv, env, port, log):  # type: ignore[no-untyped-def]
    return SglangServer([sys.executable, str(FAKE), "--port", str(port)], env, port, log)


def run(model: Path, tmp_path: Path, behaviour: str, **options):  # type: ignore[no-untyped-def]
    request = ServerParityRequest(
        model, tmp_path / "out", prompts=DEFAULT_PROMPTS[:3], new_tokens=12, ready_timeout_s=20, **options
    )
    env = dict(os.environ, FAKE_BEHAVIOUR=behaviour, PYTHONPATH=str(REPO))
    return run_server_parity(request, fake_launch, base_env=env, preflight=False)


def gates(report) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {g.gate: g.status for g in report.gates}


def test_equal_tokens_from_a_kernel_that_served_pass_and_the_report_is_on_disk(model, tmp_path):
    report = run(model, tmp_path, "same")
    assert report.status == "pass", report.reasons()
    assert gates(report) == {
        "tokens_vs_triton": "pass",
        "served": "pass",
        "accept_length_triton": "pass",
        "accept_length_ddbench": "pass",
    }
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    assert document["status"] == "pass" and document["complete"] is True
    triton, ours = document["runs"]
    assert (triton["env"], ours["env"]["DDBENCH_APPLY"], ours["env"]["SGLANG_PLUGINS"]) == (
        {"DDBENCH_APPLY": "off"},
        "apply",
        "ddbench",
    )
    assert ours["plugin"][0]["counters"]["served_candidate"] == 40
    assert len(ours["generations"]) == 3 and ours["generations"][0]["spec_verify_ct"] == 4
    assert (tmp_path / "out" / "triton-server.log").read_text().startswith("fake server: loading")


@pytest.mark.parametrize(
    ("behaviour", "failing", "said"),
    [
        ("diverge", "tokens_vs_triton", "request 1 token 5 after"),
        ("unserved", "served", "the plugin wrote no counters"),
        ("breach", "served", "breached; Triton served from then on"),
        ("no-spec", "accept_length_ddbench", "below the drafter's floor"),
    ],
)
def test_each_gate_fails_on_what_it_guards(model, tmp_path, behaviour, failing, said):
    report = run(model, tmp_path, behaviour)
    assert report.status == "fail" and report.exit_code == 1
    assert gates(report)[failing] == "fail"
    assert any(said in reason for reason in report.reasons()), report.reasons()


def test_a_divergence_on_a_near_tie_passes_and_stops_the_comparison(model, tmp_path):
    report = run(model, tmp_path, "tie")
    tokens = next(g for g in report.gates if g.gate == "tokens_vs_triton")
    assert tokens.status == "pass" and "near-tie" in tokens.detail
    assert tokens.figures["divergence"] == {"request": 1, "token": 5} and tokens.figures["tie"] is True
    assert run(model, tmp_path, "tie", tie_margin=0.005).status == "fail"  # the same margins above tau


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [("crash", "CUDA out of memory while loading"), ("hang", "not ready after 3 s")],
)
def test_a_server_that_dies_or_never_loads_is_an_error_with_its_output(model, tmp_path, behaviour, said):
    request = ServerParityRequest(model, tmp_path / "out", new_tokens=4, ready_timeout_s=3)
    env = dict(os.environ, FAKE_BEHAVIOUR=behaviour, PYTHONPATH=str(REPO))
    report = run_server_parity(request, fake_launch, base_env=env, preflight=False)
    assert report.status == "error" and report.exit_code == 1 and not report.gates
    assert len(report.runs) == 1 and said in (report.runs[0].error or "")


def test_the_command_line_is_what_sglangs_own_parser_accepts(model, tmp_path):
    request = ServerParityRequest(model, tmp_path, num_draft_tokens=8, cuda_graphs=False, tp=2)
    argv = server_argv(request, 30001)
    check_server_args(argv)  # SGLang's real ServerArgs parser; raises on a flag it does not know
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"
    assert {"--enable-deterministic-inference", "--disable-cuda-graph"} <= set(argv)
    with pytest.raises(InputError, match="does not know --no-such-flag"):
        check_server_args([*argv, "--no-such-flag"])
    with pytest.raises(InputError, match=r"refuses its arguments.*attention-backend"):
        check_server_args([*argv, "--attention-backend", "no-such-backend"])


def test_the_triton_server_has_the_plugin_off_whatever_the_callers_environment(model, tmp_path):
    request = ServerParityRequest(model, tmp_path)
    caller = {"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_EVERY": "1", "PATH": "/bin"}
    triton, set_triton = server_env(request, "triton", caller)
    ours, set_ours = server_env(request, "ddbench", caller)
    assert triton == {"DDBENCH_APPLY": "off", "PATH": "/bin"} and set_triton == {"DDBENCH_APPLY": "off"}
    assert (
        "DDBENCH_APPLY_EVERY" not in ours
        and ours["DDBENCH_APPLY_COUNTERS_EVERY"] == "0" == set_ours["DDBENCH_APPLY_COUNTERS_EVERY"]
    )


def test_on_this_machine_it_says_why_it_cannot_run_and_starts_nothing(model, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the case tested here is a machine without one")
    out = tmp_path / "out"
    command = [sys.executable, "-c", "from ddbench.cli.main import main; main()", "server-parity"]
    done = subprocess.run(
        [*command, str(model), "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stdout + done.stderr
    document = json.loads((out / "report.json").read_text())
    assert document["status"] == "unavailable" and document["runs"] == []
    assert any("no CUDA GPU" in reason for reason in document["unavailable"])
    assert "Traceback" not in done.stderr and "unavailable: no CUDA GPU" in done.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["deepseek-ai/DeepSeek-V2-Lite"], "never downloads weights"),
        (["{model}", "--speculative-algorithm", "EAGLE"], "needs --draft-model"),
        (["{model}", "--speculative-algorithm", "MEDUSA"], "expected one of NGRAM"),
        (["{model}", "--prompts", "{empty}"], "no prompt in it"),
        (["{model}", "--prompts", "{bad_json}"], "[1]: a prompt must be a non-empty string"),
        (["{model}", "--tie-margin", "nan"], "not a finite number"),
        (["{model}/config.json"], "not a model folder"),
    ],
)
def test_bad_input_exits_2_naming_it(model, tmp_path, args, said):
    from click.testing import CliRunner

    from ddbench.cli.main import cli

    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "bad.json").write_text('["a", 3]')
    names = {"model": model, "empty": tmp_path / "empty.txt", "bad_json": tmp_path / "bad.json"}
    result = CliRunner().invoke(cli, ["server-parity", *[a.format(**names) for a in args]])
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output

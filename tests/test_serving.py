"""The SGLang plugin: shadow, apply, the breaker and breach captures, through SGLang's real `load_plugins()`
and `HookRegistry` on the CPU (Triton under its interpreter, the custom kernel under the emulation).

Calls are made as the Triton backend's target verify makes them (ddbench.capture.harness), in
over-allocated buffers with garbage tails, and twice in the same buffers at other lengths, as a CUDA-graph
runner writes each replay.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import importlib
import json
import logging
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ddbench.backends import get_backend
from ddbench.backends.triton_sglang import extend_attention_arguments
from ddbench.capture.harness import TARGET_MODULE, call_like_sglang
from ddbench.cli.main import cli
from ddbench.inputs import generate_inputs
from ddbench.inputs.capture_file import read_capture
from ddbench.inputs.layout import TENSOR_FIELDS
from ddbench.inputs.served_buffers import write_into
from ddbench.metrics import PASS, judge, parity_figures
from ddbench.serving import plugin
from ddbench.serving.comparison import serving_bounds
from ddbench.serving.settings import DEFAULT_EVERY, settings_from_env
from ddbench.suite import parse_suite
from ddbench.suite.bound_sets import BOUND_SETS
from ddbench.suite.from_json import bound_from_json

pytestmark = pytest.mark.triton

CAPACITY = 48  # keys a request the buffers hold


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


@pytest.fixture(scope="module")
def calls():
    """Two calls of different lengths in the same over-allocated buffers (a CUDA-graph group's first call
    and a replay), with what Triton (unhooked), cuda-emu and fp64 give on each exact-size call."""
    entry = {
        "model": "kimi-k2.6",
        "layout": {"tp": 8},
        "batch_size": 2,
        "prefix": [5, 40],
        "seed": 3,
        "tree": {"kind": "ddtree", "budget": 8},
        "sglang_buffers": {"mode": "cuda-graph", "max_context": CAPACITY, "replay_prefix": [[33, 2]]},
    }
    group = parse_suite({"name": "serving", "cases": [entry]}, "test").cases
    xs = [generate_inputs(c) for c in group]
    assert xs[0].tail_lengths()["kv_indices"] > 0  # over-allocated, garbage past the lengths
    triton, emu, fp64 = get_backend("triton"), get_backend("cuda-emu"), get_backend("reference-fp64")
    if not triton.availability().ok:
        pytest.skip(triton.availability().detail)
    expected = []
    for x in xs:
        exact = x.exact()
        expected.append(
            {
                name: b.run(dataclasses.replace(exact, o_extend=exact.o_extend.clone())).clone()
                for name, b in (("triton", triton), ("cuda-emu", emu), ("fp64", fp64))
            }
        )
    buffers = copied(xs[0])  # the group's buffers; each test writes a pristine call into them
    return buffers, xs, expected


def copied(x):
    fresh = {name: getattr(x, name).clone() for name in TENSOR_FIELDS if name != "v_buffer"}
    return dataclasses.replace(x, **fresh, v_buffer=fresh["k_buffer"][..., : x.v_buffer.shape[-1]])


def in_buffers(buffers, x):
    """Call x written into the buffers, as the graph runner writes a replay (their tails keep old garbage)."""
    return write_into(buffers, x)


@pytest.fixture
def armed(monkeypatch, tmp_path):
    """Arm the plugin through SGLang's own loader with these DDBENCH_APPLY* settings; undo it afterwards."""
    from sglang.srt import plugins as sglang_plugins
    from sglang.srt.plugins.hook_registry import HookRegistry

    module = importlib.import_module(TARGET_MODULE)
    saved = {"fn": module.extend_attention_fwd}  # not a module global: HookRegistry re-points those

    def arm(**settings):
        for key in [k for k in os.environ if k.startswith("DDBENCH_APPLY")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("SGLANG_PLUGINS", "ddbench")
        monkeypatch.setenv("DDBENCH_APPLY_DIR", str(tmp_path / "apply"))
        for key, value in settings.items():
            monkeypatch.setenv(f"DDBENCH_APPLY{'_' + key.upper() if key != 'mode' else ''}", value)
        module.extend_attention_fwd = saved["fn"]  # never a hook around an earlier test's hook
        HookRegistry.reset()
        plugin.disarm()
        monkeypatch.setattr(sglang_plugins, "_plugins_loaded", False)
        sglang_plugins.load_plugins()
        return plugin.active_hook()

    yield arm
    module.extend_attention_fwd = saved["fn"]
    HookRegistry.reset()
    plugin.disarm()


def log_lines(directory: Path) -> list[dict]:
    files = list(directory.glob("apply-*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines()]


# -- settings ------------------------------------------------------------------------------------------------


def test_settings_default_and_name_the_variable_of_a_bad_value():
    assert settings_from_env({}) is None and settings_from_env({"DDBENCH_APPLY": "off"}) is None
    s = settings_from_env({"DDBENCH_APPLY": "apply+shadow"})
    assert (s.backend, s.every, s.bounds, s.allow_build, s.candidate_serves, s.compares) == (
        "cuda",
        DEFAULT_EVERY,
        "cuda",
        False,
        True,
        True,
    )
    assert (
        settings_from_env({"DDBENCH_APPLY": "shadow", "DDBENCH_APPLY_BACKEND": "pkg:K"}).bounds == "candidate"
    )
    for env, named in (
        ({"DDBENCH_APPLY": "on"}, "DDBENCH_APPLY='on'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_EVERY": "0"}, "DDBENCH_APPLY_EVERY='0'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_BOUNDS": "triton"}, "DDBENCH_APPLY_BOUNDS='triton'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_BUILD": "yes"}, "DDBENCH_APPLY_BUILD='yes'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_COUNTERS_EVERY": "-1"}, "COUNTERS_EVERY='-1'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_COUNTERS_EVERY": "nan"}, "COUNTERS_EVERY='nan'"),
        ({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_COUNTERS_EVERY": "1e999"}, "COUNTERS_EVERY='1e999'"),
    ):
        with pytest.raises(ValueError, match=named.replace("+", r"\+")):
            settings_from_env(env)


def test_serving_bounds_are_the_sets_bounds_against_triton():
    assert serving_bounds("cuda") == tuple(
        bound_from_json(b) for b in BOUND_SETS["cuda"] if b["against"] == "triton"
    )
    assert [b.against for b in serving_bounds("cuda-emu")] == ["triton"]


def test_a_bad_setting_logs_one_line_and_leaves_triton_serving(armed, calls, caplog):
    buffers, xs, expected = calls
    with caplog.at_level(logging.ERROR, "ddbench.serving"):
        hook = armed(mode="apply", every="-3")
    assert hook is None
    lines = [r.getMessage() for r in caplog.records if r.name == "ddbench.serving"]
    assert lines == [
        "ddbench apply: not armed: DDBENCH_APPLY_EVERY='-3': expected an integer >= 1 (1 compares every call)"
    ]
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])


# -- the modes ---------------------------------------------------------------------------------------------


def test_off_registers_nothing_and_gives_tritons_bits(armed, calls):
    buffers, xs, expected = calls
    module = importlib.import_module(TARGET_MODULE)
    before = module.extend_attention_fwd
    assert armed() is None
    assert module.extend_attention_fwd is before
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[1])), expected[1]["triton"])


def test_shadow_gives_tritons_bits_and_compares_the_candidate(armed, calls, tmp_path):
    buffers, xs, expected = calls
    hook = armed(mode="shadow", backend="cuda-emu", every="1")
    for x, want in zip(xs, expected, strict=True):
        assert same_bits(call_like_sglang(in_buffers(buffers, x), layer_id=5), want["triton"])
    c = hook.counters
    assert (c.eligible, c.compared, c.served_triton, c.served_candidate, c.breaches) == (2, 2, 2, 0, 0)
    assert 0 < c.worst["max_row_ulp"] <= 3.0 and not hook.breaker.tripped
    hook.write_counters()
    lines = log_lines(tmp_path / "apply")
    assert [line["event"] for line in lines] == ["start", "counters"]
    assert lines[0]["mode"] == "shadow" and lines[-1]["compared"] == 2


def test_apply_serves_the_candidates_output_right_at_both_lengths(armed, calls):
    buffers, xs, expected = calls
    hook = armed(mode="apply", backend="cuda-emu", every="1")
    bound = bound_from_json(BOUND_SETS["cuda-emu"][0])
    for x, want in zip(xs, expected, strict=True):
        out = call_like_sglang(in_buffers(buffers, x))
        assert same_bits(out, want["cuda-emu"])  # the exact-size call's bits, through garbage tails
        assert not same_bits(out, want["triton"])
        assert judge(bound, parity_figures(out, want["fp64"]), "cuda-emu").status == PASS
    assert (hook.counters.served_candidate, hook.counters.served_triton) == (2, 0)


def test_a_wrong_candidate_breaches_at_once_and_triton_serves_from_then_on(
    armed, calls, tmp_path, monkeypatch
):
    buffers, xs, expected = calls
    monkeypatch.setenv("RANK", "3")  # the launcher's rank, where SGLang's parallel state is not set up
    hook = armed(mode="apply+shadow", backend="serving_candidates:WrongKernel", every="1")
    for x, want in zip(xs, expected, strict=True):
        assert same_bits(call_like_sglang(in_buffers(buffers, x), layer_id=7), want["triton"])
    c = hook.counters
    assert hook.breaker.tripped and c.breaches == 1 and c.compared == 1
    assert (c.served_candidate, c.served_triton, c.fallbacks) == (0, 2, {"breach": 1})
    breach = [line for line in log_lines(tmp_path / "apply") if line["event"] == "breach"]
    assert len(breach) == 1 and breach[0]["layer"] == 7 and breach[0]["call_index"] == 0
    assert {f.name.split("-p")[0] for f in (tmp_path / "apply").iterdir()} == {
        "apply-r3",
        "breach-r3-l7-n000000",
    }
    assert any(r.startswith("max_row_ulp") for r in breach[0]["reasons"])
    capture = read_capture(breach[0]["capture"])
    assert same_bits(capture.output, expected[0]["triton"])
    assert capture.candidate_output is not None and not same_bits(capture.candidate_output, capture.output)
    assert capture.metadata["breach"]["backend"] == "candidate"


def test_a_breach_capture_replays_with_run_and_explain(armed, calls, tmp_path):
    buffers, xs, _ = calls
    armed(mode="apply+shadow", backend="serving_candidates:WrongKernel", every="1")
    call_like_sglang(in_buffers(buffers, xs[0]), layer_id=2)
    suite = next((tmp_path / "apply").glob("breach-*.json"))
    runner = CliRunner()
    results, outputs = tmp_path / "r.json", tmp_path / "outputs"
    run = runner.invoke(cli, ["run", str(suite), "--json", str(results), "--save-outputs", str(outputs)])
    assert run.exit_code == 1, run.output
    document = json.loads(results.read_text())
    pairs = {(p["candidate"], p["against"]): p["status"] for case in document["cases"] for p in case["pairs"]}
    assert pairs[("captured-candidate", "captured")] == "fail"
    judged = next(p for p in document["cases"][0]["pairs"] if p["candidate"] == "captured-candidate")
    breach = next(line for line in log_lines(tmp_path / "apply") if line["event"] == "breach")
    assert judged["reasons"] == breach["reasons"]  # the server's verdict, figure for figure
    assert pairs[("captured", "reference-fp64")] == "pass" and pairs[("triton", "captured")] == "pass"
    case_id = document["cases"][0]["id"]
    explained = runner.invoke(
        cli,
        [
            "explain",
            str(results),
            "--case",
            case_id,
            "--backend",
            "captured-candidate",
            "--outputs",
            str(outputs),
        ],
    )
    assert explained.exit_code == 0, explained.output
    assert "captured-candidate" in explained.output


# -- faults --------------------------------------------------------------------------------------------------


def test_a_raising_candidate_is_a_breach_and_triton_serves(armed, calls, tmp_path):
    buffers, xs, expected = calls
    hook = armed(mode="apply", backend="serving_candidates:RaisingKernel", every="50")
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[1])), expected[1]["triton"])
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
    assert hook.breaker.tripped and hook.counters.breaches == 1
    breach = next(line for line in log_lines(tmp_path / "apply") if line["event"] == "breach")
    assert "RuntimeError: an illegal memory access" in breach["reasons"][0]
    capture = read_capture(breach["capture"])
    assert capture.candidate_output is None and same_bits(capture.output, expected[1]["triton"])


def test_a_nan_in_the_candidate_is_a_breach_in_shadow_and_apply(armed, calls):
    buffers, xs, expected = calls
    for mode in ("shadow", "apply"):
        hook = armed(mode=mode, backend="serving_candidates:NanKernel", every="1")
        assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
        assert hook.breaker.tripped, mode
        assert "1 NaN/Inf in candidate output" in hook.breaker.reason


def test_an_unavailable_candidate_leaves_triton_serving_and_says_why(armed, calls, tmp_path):
    buffers, xs, expected = calls
    hook = armed(mode="apply", backend="serving_candidates:Unavailable")
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
    reason = "unavailable: no GPU of the kind this kernel needs (simulated)"
    assert hook.counters.ineligible == {reason: 1} and hook.counters.served_triton == 1
    lines = log_lines(tmp_path / "apply")  # the counts say it too: nothing else would, if Triton serves all
    assert [line["event"] for line in lines] == ["unavailable", "counters"]
    assert lines[1]["ineligible"] == {reason: 1} and lines[1]["served_candidate"] == 0


def test_cuda_without_a_gpu_is_a_clear_refusal_not_a_crash(armed, calls):
    buffers, xs, expected = calls
    hook = armed(mode="apply")  # the default candidate, cuda
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
    (reason,) = hook.counters.ineligible
    assert reason.startswith("unavailable: no CUDA GPU here")


def test_a_full_log_folder_never_reaches_the_server(armed, calls, monkeypatch, caplog):
    buffers, xs, expected = calls
    hook = armed(mode="apply+shadow", backend="serving_candidates:WrongKernel", every="1")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ddbench.serving.apply_log.os.write", full)
    monkeypatch.setattr("ddbench.capture.format.write_atomic", full)
    with caplog.at_level(logging.ERROR, "ddbench.serving"):
        for x, want in zip(xs, expected, strict=True):
            assert same_bits(call_like_sglang(in_buffers(buffers, x)), want["triton"])
    assert hook.breaker.tripped and hook.counters.log_errors >= 1
    said = [r.getMessage() for r in caplog.records if "cannot write the log" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0]
    assert any("BREACH" in r.getMessage() and "not written" in r.getMessage() for r in caplog.records)


# -- CUDA-graph capture ------------------------------------------------------------------------------------


def test_under_graph_capture_apply_records_the_capacity_launch_and_nothing_is_compared(
    armed, calls, monkeypatch
):
    buffers, xs, _ = calls
    monkeypatch.setattr("ddbench.serving.hook._capturing", lambda q: True)
    hook = armed(mode="apply+shadow", backend="serving_candidates:RecordingKernel", every="1")
    call_like_sglang(in_buffers(buffers, xs[0]))
    assert hook.candidate.launches == ["capture"]
    assert (hook.counters.compared, hook.counters.uncompared_graph, hook.counters.served_candidate) == (
        0,
        1,
        1,
    )
    shadow = armed(mode="shadow", backend="serving_candidates:RecordingKernel", every="1")
    call_like_sglang(in_buffers(buffers, xs[0]))
    assert shadow.candidate.launches == [] and shadow.counters.uncompared_graph == 1


def test_counters_every_0_writes_the_counts_after_each_served_call_captures_included(
    armed, calls, monkeypatch, tmp_path
):
    """SGLang ends its schedulers with SIGKILL, so the exit line never comes: `server-parity` reads these."""
    buffers, xs, _ = calls
    monkeypatch.setattr("ddbench.serving.hook._capturing", lambda q: True)
    armed(mode="apply", backend="serving_candidates:RecordingKernel", counters_every="0")
    for _ in range(3):
        call_like_sglang(in_buffers(buffers, xs[0]))
    counts = [
        line["served_candidate"] for line in log_lines(tmp_path / "apply") if line["event"] == "counters"
    ]
    assert counts == [1, 2, 3]
    armed(mode="apply", backend="serving_candidates:RecordingKernel")  # the default: once a minute
    for f in (tmp_path / "apply").glob("apply-*.jsonl"):
        f.unlink()
    for _ in range(3):
        call_like_sglang(in_buffers(buffers, xs[0]))
    assert [line["event"] for line in log_lines(tmp_path / "apply")] == ["start"]


def test_a_candidate_that_cannot_be_captured_leaves_the_graph_to_triton(armed, calls, monkeypatch):
    buffers, xs, expected = calls
    monkeypatch.setattr("ddbench.serving.hook._capturing", lambda q: True)
    hook = armed(mode="apply", backend="cuda-emu")
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
    assert list(hook.counters.ineligible) == [
        "cuda-emu cannot be recorded into a CUDA graph (no launch_in_capture)"
    ]


# -- the .pth route, the report, the build ----------------------------------------------------------------


def test_the_pth_route_and_the_plugin_never_stack(armed, calls, monkeypatch, tmp_path):
    buffers, xs, _expected = calls
    hook = armed(mode="shadow", backend="cuda-emu", every="1")
    module = importlib.import_module(TARGET_MODULE)
    wrapped = module.extend_attention_fwd
    plugin.arm_module(module)  # the .pth route, late: already armed through the plugin, so it does nothing
    assert module.extend_attention_fwd is wrapped and plugin.armed_route() == "plugin"
    call_like_sglang(in_buffers(buffers, xs[0]))
    assert hook.counters.seen == 1


def test_the_pth_route_alone_wraps_the_function(monkeypatch, calls, tmp_path):
    buffers, xs, expected = calls
    module = importlib.import_module(TARGET_MODULE)
    original = module.extend_attention_fwd
    plugin.disarm()
    monkeypatch.setenv("DDBENCH_APPLY", "apply")
    monkeypatch.setenv("DDBENCH_APPLY_BACKEND", "cuda-emu")
    monkeypatch.setenv("DDBENCH_APPLY_DIR", str(tmp_path))
    try:
        plugin.arm_module(module)
        assert plugin.armed_route() == "pth" and module.extend_attention_fwd.__wrapped__ is original
        assert same_bits(call_like_sglang(in_buffers(buffers, xs[1])), expected[1]["cuda-emu"])
    finally:
        module.extend_attention_fwd = original
        plugin.disarm()


def test_apply_report_tables_every_rank_and_exits_1_on_a_breach(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    counters = {
        "event": "counters",
        "mode": "apply+shadow",
        "backend": "cuda",
        "seen": 100,
        "eligible": 60,
        "served_candidate": 60,
        "served_triton": 0,
        "compared": 3,
        "breaches": 0,
        "worst": {"max_row_ulp": 1.5, "mean_row_ulp": 0.1},
        "tripped": False,
    }
    (logs / "apply-r0-p11.jsonl").write_text(json.dumps({**counters, "rank": 0, "pid": 11}) + "\n")
    breach = {
        "event": "breach",
        "rank": 1,
        "pid": 12,
        "layer": 3,
        "call_index": 97,
        "reasons": ["max_row_ulp 9 > 4"],
        "capture": "breach-r1-l3-n000097-p12.safetensors",
    }
    (logs / "apply-r1-p12.jsonl").write_text(
        json.dumps(breach)
        + "\n"
        + json.dumps({**counters, "rank": 1, "pid": 12, "tripped": True})
        + '\n{"event": "coun'  # killed mid-line
    )
    runner = CliRunner()
    result = runner.invoke(cli, ["apply", "report", str(logs), "--json", str(tmp_path / "s.json")])
    assert result.exit_code == 1, result.output
    assert (
        "TRIPPED" in result.output and "max_row_ulp 9 > 4" in result.output and "cut short" in result.output
    )
    summaries = json.loads((tmp_path / "s.json").read_text())
    assert [s["rank"] for s in summaries] == [0, 1] and summaries[1]["tripped"]
    (logs / "apply-r1-p12.jsonl").write_text(json.dumps({**counters, "rank": 1}) + "\n")
    assert runner.invoke(cli, ["apply", "report", str(logs)]).exit_code == 0
    (logs / "apply-r2-p13.jsonl").write_text("{}\nnot json\n")
    bad = runner.invoke(cli, ["apply", "report", str(logs)])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert f"{logs / 'apply-r2-p13.jsonl'}: line 1: is not an apply-log record" in bad.output


def test_a_missing_build_is_a_refusal_naming_the_command(monkeypatch, tmp_path):
    from ddbench.kernel import cuda_build

    monkeypatch.setattr(cuda_build.torch.cuda, "get_device_capability", lambda *a: (12, 0))
    monkeypatch.setattr(cuda_build, "build_dir", lambda: tmp_path)
    assert cuda_build.built_extension() is None
    with pytest.raises(cuda_build.KernelNotBuilt, match="run `ddbench apply build` before serving"):
        cuda_build.load_cuda_extension.__wrapped__(build=False)


@pytest.mark.slow
def test_apply_install_hook_arms_a_fresh_interpreter_through_the_pth_file(tmp_path, monkeypatch):
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))  # a folder whose .pth files run, as site.addsitedir leaves it
    runner = CliRunner()
    result = runner.invoke(cli, ["apply", "install-hook", "--site-dir", str(site)])
    assert result.exit_code == 0, result.output
    probe = (
        f"import site, sys; site.addsitedir({str(site)!r}); import importlib; "
        f"m = importlib.import_module({TARGET_MODULE!r}); from ddbench.serving import plugin; "
        "print(plugin.armed_route(), hasattr(m.extend_attention_fwd, '__wrapped__'))"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("DDBENCH_")}

    def python(**env):
        return subprocess.run(
            [sys.executable, "-c", probe],
            env={**base, "TRITON_INTERPRET": "1", **env},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    armed = python(DDBENCH_APPLY="shadow", DDBENCH_APPLY_BACKEND="cuda-emu", DDBENCH_APPLY_DIR=str(tmp_path))
    assert (armed.returncode, armed.stdout.strip()) == (0, "pth True"), armed.stderr
    for off in ({}, {"DDBENCH_APPLY": "off"}):
        quiet = python(**off)
        assert (quiet.returncode, quiet.stdout.strip()) == (0, "None False"), quiet.stderr
    bad = python(DDBENCH_APPLY="sideways")
    assert (bad.returncode, bad.stdout.strip()) == (0, "None False")
    assert "ddbench apply: not armed: DDBENCH_APPLY='sideways'" in bad.stderr
    assert runner.invoke(cli, ["apply", "uninstall-hook", "--site-dir", str(site)]).exit_code == 0
    assert not (site / plugin.PTH_HOOK.name).exists()


def test_apply_build_without_a_gpu_says_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(cli, ["apply", "build"])
    assert result.exit_code == 3 and "Traceback" not in result.output
    assert "unavailable: no CUDA GPU here" in result.output


def test_ineligible_reasons_count_one_entry_a_cause_and_stay_bounded():
    from ddbench.serving.counters import MAX_REASONS, OTHER, ApplyCounters

    c = ApplyCounters()
    firsts = [c.count(c.ineligible, f"not absorbed MLA (q_extend ({t}, 16, 192))") for t in (9, 18, 27)]
    assert firsts == [True, False, False] and c.ineligible == {"not absorbed MLA (q_extend (N, N, N))": 3}
    for i in range(3 * MAX_REASONS):
        c.count(c.ineligible, f"cause {'x' * i}")
    assert len(c.ineligible) == MAX_REASONS + 1 and c.ineligible[OTHER] == 2 * MAX_REASONS + 1


def test_a_check_that_fails_serves_triton_never_the_unchecked_candidate(armed, calls, monkeypatch):
    buffers, xs, expected = calls

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr("ddbench.serving.hook.compare", broken)
    hook = armed(mode="apply+shadow", backend="cuda-emu", every="1")
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[0])), expected[0]["triton"])
    monkeypatch.setattr("ddbench.serving.hook.poisoned_mask", broken)
    alone = armed(mode="apply", backend="cuda-emu", every="1")
    assert same_bits(call_like_sglang(in_buffers(buffers, xs[1])), expected[1]["triton"])
    for h in (hook, alone):
        c = h.counters
        assert (c.served_candidate, c.served_triton, c.errors, c.fallbacks) == (
            0,
            1,
            1,
            {"the check failed": 1},
        )
        assert not h.breaker.tripped  # our failure, not the candidate's


def test_when_triton_fails_after_the_candidate_the_breach_is_still_counted(calls, tmp_path):
    from serving_candidates import RaisingKernel

    from ddbench.serving.hook import ApplyHook

    buffers, xs, _ = calls
    real = importlib.import_module(TARGET_MODULE).extend_attention_fwd

    @functools.wraps(real)
    def failing_triton(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    settings = settings_from_env({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_DIR": str(tmp_path)})
    hook = ApplyHook(settings, RaisingKernel())
    args, kwargs = extend_attention_arguments(in_buffers(buffers, xs[0]))
    with pytest.raises(RuntimeError, match="illegal memory access"):  # Triton's own error passes through
        hook(failing_triton, *args, **kwargs)
    assert hook.breaker.tripped and hook.counters.breaches == 1


def test_arguments_the_function_refuses_are_left_to_it(calls, tmp_path):
    from ddbench.serving.hook import ApplyHook

    buffers, xs, _ = calls
    real = importlib.import_module(TARGET_MODULE).extend_attention_fwd
    args, kwargs = extend_attention_arguments(in_buffers(buffers, xs[0]))
    settings = settings_from_env({"DDBENCH_APPLY": "apply", "DDBENCH_APPLY_DIR": str(tmp_path)})
    hook = ApplyHook(settings, get_backend("cuda-emu"))
    for bad_args, bad_kwargs in (
        ((*args, *range(40)), kwargs),  # more positions than parameters
        (args, {**kwargs, "no_such_option": 1}),
        (args, {**kwargs, "q_extend": args[0]}),  # given twice
    ):
        with pytest.raises(TypeError):
            hook(real, *bad_args, **bad_kwargs)
    assert hook.counters.ineligible == {"arguments the function itself refuses": 3}
    assert hook.counters.served_candidate == 0

"""End-to-end parity against a real SGLang server: the same greedy prompts, Triton serving, then the kernel.

Two servers start one after the other on this machine's loopback, with speculation on (NGRAM needs no
draft model; EAGLE or NEXTN where the user gives draft weights) and deterministic inference: first with
Triton alone, then with the ddbench plugin in `apply` mode (the candidate serves every target-verify call it
can, CUDA graphs included). Both get the same temperature-0 prompts as one batch. Gates:

- tokens: the token IDs equal, prompt by prompt, tie-aware as in generation cases (a divergence passes only
  where both servers' top-2 log-probability margins are below tau; the comparison stops there);
- served: the plugin's own counts say the candidate served and nothing fell back to Triton (equal text from
  a kernel that never ran proves nothing);
- accept length, on each server: speculation ran and accepted drafts (completion tokens per verify step).

What this machine cannot do (no GPU, no SGLang server stack, no plugin entry point, the candidate
unavailable) is found before anything starts and reported as `unavailable`, each reason named.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.errors import InputError
from ddbench.metrics.generation_gates import GateCheck, accept_gate, agreement, tokens_gate
from ddbench.metrics.served_gate import ServedCounts, served_gate
from ddbench.report.apply_logs import ProcessSummary, read_apply_logs
from ddbench.results.server_parity import ServerParityReport, ServerRun
from ddbench.runner.sglang_server import ServerFailed, SglangServer, free_port
from ddbench.serving.settings import (
    ENV_BACKEND,
    ENV_COUNTERS_EVERY,
    ENV_DIR,
    ENV_MODE,
)

ALGORITHMS = ("NGRAM", "EAGLE", "EAGLE3", "NEXTN")
NEEDS_DRAFT = ("EAGLE", "EAGLE3")
APPLY_MODES = ("apply", "apply+shadow")
SERVER_IMPORT = "sglang.srt.entrypoints.http_server"
PLUGIN_GROUP = "sglang.srt.plugins"
IMPORT_CHECK_TIMEOUT_S = 300.0
TRITON, DDBENCH = "triton", "ddbench"

DEFAULT_PROMPTS = (
    "List the numbers from 1 to 40, separated by commas: 1, 2, 3,",
    "Write a Python function that returns the n-th Fibonacci number, then call it for n from 1 to 10 and "
    "print each result.",
    "Repeat the following sentence five times: The quick brown fox jumps over the lazy dog.",
    "Explain in three paragraphs how a hash table handles collisions.",
    "Translate into French: Good morning. How are you today? I would like a cup of coffee, please.",
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
    "Write a SQL query that selects the name and salary of every employee whose salary is above the "
    "average salary of their department.",
    "Continue the story: Once upon a time, in a small village at the foot of a mountain, there lived an "
    "old clockmaker who",
)


@dataclass(frozen=True)
class ServerParityRequest:
    model_path: Path
    out_dir: Path
    algorithm: str = "NGRAM"
    draft_model_path: Path | None = None
    num_draft_tokens: int | None = None  # None: SGLang's default for the algorithm
    tp: int = 1
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    new_tokens: int = 128
    tie_margin: float = 0.05
    min_accept_length: float = 1.2
    mode: str = "apply"
    candidate: str = "cuda"
    cuda_graphs: bool = True
    deterministic: bool = True  # SGLang's --enable-deterministic-inference
    server_args: tuple[str, ...] = ()
    ready_timeout_s: float = 1800.0
    generate_timeout_s: float = 900.0
    python: str = field(default_factory=lambda: sys.executable)

    def to_json(self) -> dict[str, Any]:
        return {
            "model_path": str(self.model_path),
            "algorithm": self.algorithm,
            "draft_model_path": None if self.draft_model_path is None else str(self.draft_model_path),
            "num_draft_tokens": self.num_draft_tokens,
            "tp": self.tp,
            "prompts": list(self.prompts),
            "new_tokens": self.new_tokens,
            "tie_margin": self.tie_margin,
            "min_accept_length": self.min_accept_length,
            "mode": self.mode,
            "candidate": self.candidate,
            "cuda_graphs": self.cuda_graphs,
            "deterministic": self.deterministic,
            "server_args": list(self.server_args),
        }


Launcher = Callable[[Sequence[str], Mapping[str, str], int, Path], SglangServer]


def check_request(request: ServerParityRequest) -> None:
    """Bad input, exit 2, before anything starts: the model folder, the draft, the numbers."""
    _local_model(request.model_path, "model path")
    if request.algorithm not in ALGORITHMS:
        raise InputError(
            f"--speculative-algorithm {request.algorithm!r}: expected one of {', '.join(ALGORITHMS)}"
        )
    if request.algorithm in NEEDS_DRAFT and request.draft_model_path is None:
        raise InputError(f"--speculative-algorithm {request.algorithm} needs --draft-model (a local folder)")
    if request.draft_model_path is not None:
        _local_model(request.draft_model_path, "draft model path")
    if request.mode not in APPLY_MODES:
        raise InputError(f"--mode {request.mode!r}: expected one of {', '.join(APPLY_MODES)}")
    if not request.prompts or any(not p.strip() for p in request.prompts):
        raise InputError("prompts: at least one, none empty")
    for name, value, low in (("--new-tokens", request.new_tokens, 1), ("--tp", request.tp, 1)):
        if value < low:
            raise InputError(f"{name} {value}: must be >= {low}")
    if request.num_draft_tokens is not None and request.num_draft_tokens < 2:
        raise InputError(
            f"--num-draft-tokens {request.num_draft_tokens}: must be >= 2 (the root and a draft)"
        )


def _local_model(path: Path, what: str) -> None:
    if not path.exists():
        hub = len(path.parts) == 2 and not str(path).startswith((".", "/"))
        why = " (ddbench never downloads weights: give a local folder)" if hub else ""
        raise InputError(f"{what}: no such folder{why}", file=str(path))
    if not path.is_dir() or not (path / "config.json").is_file():
        raise InputError(f"{what}: not a model folder (no config.json in it)", file=str(path))


def server_argv(request: ServerParityRequest, port: int) -> list[str]:
    argv = [
        request.python, "-m", "sglang.launch_server",
        "--model-path", str(request.model_path),
        "--host", "127.0.0.1", "--port", str(port),
        "--tp", str(request.tp),
        "--attention-backend", "triton",
        "--speculative-algorithm", request.algorithm,
        "--random-seed", "0",
    ]  # fmt: skip
    if request.deterministic:
        argv.append("--enable-deterministic-inference")
    if request.draft_model_path is not None:
        argv += ["--speculative-draft-model-path", str(request.draft_model_path)]
    if request.num_draft_tokens is not None:
        argv += ["--speculative-num-draft-tokens", str(request.num_draft_tokens)]
    if not request.cuda_graphs:
        argv.append("--disable-cuda-graph")
    return argv + list(request.server_args)


def check_server_args(argv: Sequence[str]) -> None:
    """SGLang's own argument parser reads the command line (its flags change between versions); InputError
    naming what it refused. Skipped silently only where SGLang itself does not import (said elsewhere)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server", add_help=False)
    ServerArgs.add_cli_args(parser)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            _, unknown = parser.parse_known_args(list(argv[3:]))
    except SystemExit:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        raise InputError(
            f"SGLang's server refuses its arguments: {lines[-1] if lines else 'usage error'}"
        ) from None
    if unknown:
        raise InputError(f"SGLang's server does not know {' '.join(unknown)} (from --server-arg)")


def unavailable_here(request: ServerParityRequest, env: Mapping[str, str]) -> list[str]:
    """Why this machine cannot run the two servers; empty when it can."""
    reasons = []
    import torch

    if not torch.cuda.is_available():
        reasons.append("no CUDA GPU here (torch.cuda.is_available() is False): SGLang's server needs one")
    elif torch.cuda.device_count() < request.tp:
        reasons.append(f"--tp {request.tp} needs {request.tp} GPUs; {torch.cuda.device_count()} here")
    problem = _server_import_problem(request.python, env)
    if problem:
        reasons.append(f"SGLang's server does not import in {request.python}: {problem}")
    if not any(ep.name == "ddbench" for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)):
        reasons.append(f"ddbench's {PLUGIN_GROUP} entry point is not installed (pip install ddbench)")
    from ddbench.backends import get_backend

    try:
        status = get_backend(request.candidate).availability()
        if not status.ok:
            reasons.append(f"the candidate {request.candidate} is unavailable: {status.detail}")
    except Exception as err:  # a plug-in that does not load
        reasons.append(f"the candidate {request.candidate} does not load: {type(err).__name__}: {err}")
    return reasons


def _build_candidate(request: ServerParityRequest, say: Callable[[str], None]) -> list[str]:
    """`ddbench apply build` for `cuda`: the server's ranks only load a build made beforehand."""
    if request.candidate != "cuda":
        return []
    from ddbench.kernel.cuda_build import built_extension, load_cuda_extension

    if built_extension() is None:
        say("building the kernel for this GPU (as ddbench apply build does)")
        try:
            load_cuda_extension()
        except Exception as err:
            return [f"the kernel does not build here: {type(err).__name__}: {err}"]
    return []


def _server_import_problem(python: str, env: Mapping[str, str]) -> str | None:
    """Import SGLang's HTTP server in the Python the servers will run (it pulls the whole serving stack)."""
    try:
        out = subprocess.run(
            [python, "-c", f"import {SERVER_IMPORT}"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=IMPORT_CHECK_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"{type(err).__name__}: {err}"
    if out.returncode == 0:
        return None
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {out.returncode}"


def server_env(
    request: ServerParityRequest, label: str, base: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(the whole environment of one server, the variables this run set). Triton's server has the plugin
    off whatever the caller's environment says; the other arms it and writes its counts after every call."""
    if label == TRITON:
        ours = {ENV_MODE: "off"}
    else:
        ours = {
            "SGLANG_PLUGINS": "ddbench",
            ENV_MODE: request.mode,
            ENV_BACKEND: request.candidate,
            ENV_DIR: str(request.out_dir / "apply-log"),
            ENV_COUNTERS_EVERY: "0",
        }
    env = {k: v for k, v in base.items() if not k.startswith(ENV_MODE)}
    return env | ours, ours


def run_server_parity(
    request: ServerParityRequest,
    launch: Launcher = SglangServer,
    say: Callable[[str], None] = lambda _: None,
    base_env: Mapping[str, str] | None = None,
    preflight: bool = True,
) -> ServerParityReport:
    """`launch` starts one server (tests pass a stand-in); `preflight` False skips the machine checks."""
    from ddbench.environment import environment

    check_request(request)
    env = dict(os.environ if base_env is None else base_env)
    report = ServerParityReport(request.to_json(), environment())
    report_path = request.out_dir / "report.json"
    if preflight:
        say("checking what this machine can run")
        report.unavailable = unavailable_here(request, env)
        if not report.unavailable:
            check_server_args(server_argv(request, 0))
            report.unavailable = _build_candidate(request, say)
    if report.unavailable:
        report.complete = True
        write_json_atomic(report_path, report.to_json())
        return report
    _clear_old_logs(request.out_dir / "apply-log")
    for label in (TRITON, DDBENCH):
        run = _serve(request, label, launch, say, env)
        report.runs.append(run)
        write_json_atomic(report_path, report.to_json())
        if run.error:
            break
    if not any(run.error for run in report.runs):
        plugin = _plugin_logs(request)
        report.runs[1].plugin = [process.to_json() for process in plugin]
        report.gates = judge(request, report.runs[0], report.runs[1], plugin)
    report.complete = True
    write_json_atomic(report_path, report.to_json())
    return report


def _clear_old_logs(folder: Path) -> None:
    """An earlier run's logs in the same folder would add their counts to this run's."""
    for old in folder.glob("apply-*.jsonl"):
        old.unlink()


def _serve(
    request: ServerParityRequest,
    label: str,
    launch: Launcher,
    say: Callable[[str], None],
    base: Mapping[str, str],
) -> ServerRun:
    port = free_port()
    argv = server_argv(request, port)
    env, ours = server_env(request, label, base)
    log = request.out_dir / f"{label}-server.log"
    run = ServerRun(label, argv, ours, log.name)
    say(f"{label}: starting the server (port {port}, output in {log})")
    try:
        with launch(argv, env, port, log) as server:
            run.ready_seconds = server.wait_ready(request.ready_timeout_s)
            say(f"{label}: ready after {run.ready_seconds:.0f} s; generating")
            start = time.monotonic()
            run.generations = server.generate(request.prompts, request.new_tokens, request.generate_timeout_s)
            run.generate_seconds = time.monotonic() - start
    except ServerFailed as err:
        run.error = str(err)
    except OSError as err:  # the launch itself (no such Python, a log that cannot be written)
        run.error = f"could not start the server: {err}"
    return run


def _plugin_logs(request: ServerParityRequest) -> list[ProcessSummary]:
    folder = request.out_dir / "apply-log"
    return read_apply_logs([str(folder)]) if folder.is_dir() else []


def judge(
    request: ServerParityRequest, triton: ServerRun, ours: ServerRun, plugin: Sequence[ProcessSummary]
) -> list[GateCheck]:
    tau = request.tie_margin
    found = agreement(
        [g.token_ids for g in triton.generations],
        [g.margins for g in triton.generations],
        [g.token_ids for g in ours.generations],
        [g.margins for g in ours.generations],
        tau,
    )
    gates = [tokens_gate("tokens_vs_triton", "the Triton server", found, tau)]
    gates.append(served_gate(request.candidate, [_counts(p) for p in plugin], request.cuda_graphs))
    for run in (triton, ours):
        gate = _accept(run, request.min_accept_length)
        gates.append(
            GateCheck(f"accept_length_{run.label}", gate.status, gate.detail, gate.figures, gate.short)
        )
    return gates


def _counts(process: ProcessSummary) -> ServedCounts:
    return ServedCounts(
        where=f"rank {'?' if process.rank is None else process.rank} (pid {process.pid})",
        served_candidate=process.count("served_candidate"),
        served_triton=process.count("served_triton"),
        fallbacks=process.count("fallbacks"),
        breaches=process.count("breaches"),
        tripped=process.tripped,
        unavailable=process.unavailable,
        ineligible=dict(process.counters.get("ineligible") or {}),
    )


def _accept(run: ServerRun, floor: float) -> GateCheck:
    tokens, steps = run.accept_counts
    return accept_gate(tokens / steps if steps else 0.0, floor, steps)

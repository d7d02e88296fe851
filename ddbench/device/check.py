"""The device script (`make device-check`): everything that needs a GPU, in one run of a few minutes.

Steps, most telling first, since a lease can end mid-run: build the kernel, its fragment probe and the
emulation at once; the kernel served through the SGLang plugin, eager and under a CUDA graph (serving.py);
the emulated warp primitives against the hardware's; the DRAM copy rate; a latency table cuda vs triton
(CUDA graphs, warm and on a cold L2) on issue 11's target shapes and a few serving cases, each judged for
parity first, and the baselines of those cases ($OUT/baseline-<suite>.json, to commit as
baselines/<gpu>/<suite>.json); parity of cuda vs triton vs the references on the smoke suite, the kernel
suite and a GPU-sized subset, while the sanitizer's memcheck and racecheck run beside it; the generation
cases at serving sizes, and `ddbench server-parity` where a model folder is given (e2e.py); the plan swept
(plan_sweep.py); Nsight Compute on five shapes (ncu.py); the model's measured error on the latency cases
($OUT/calibration.json, to commit as ddbench/model/calibration.json; calibrate.py redoes it on any machine
from a device-check.json). Each step's result is written to $OUT/device-check.json (or results/device/) as
soon as it ends, so a timeout keeps what finished. `DDBENCH_DEVICE_BUDGET_S` (default 600) is the whole
run's time: steps past it are skipped, saying so; `DDBENCH_DEVICE_STEPS` (comma-separated) runs only those.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ddbench.atomic import write_json_atomic
from ddbench.backends import get_backend
from ddbench.backends.registry import BUILTINS
from ddbench.device.bundle import bundle
from ddbench.device.calibrate import calibrate
from ddbench.device.cases import find_cuda_tool, suite_cases
from ddbench.device.e2e import step_e2e
from ddbench.device.latency import step_latency
from ddbench.device.ncu import step_ncu
from ddbench.device.plan_sweep import SWEEP_SUITE, step_plan_sweep
from ddbench.device.prebuild import build_all
from ddbench.device.serving import step_serving
from ddbench.environment import environment
from ddbench.inputs.suite_file import load_suite_file
from ddbench.runner import Session, SessionOptions
from ddbench.runner.sinks import ResultsFileSink, RunFacts
from ddbench.suite.model import ANY_BACKEND

PARITY_SUITES = (
    ("suites/smoke.json", None),
    ("suites/kernel-parity.json", None),
    ("suites/k26-verify.json", "gpu and full and tp8 and bs4 and (p4096 or p32768)"),
)
# a 32-row launch, a ragged batch, and a 48-row launch whose combine runs in two halves (16k keys)
SANITIZER_CASES = ("suites/kernel-parity.json", "q1 and p500", "ragged and ddtree", "long and p16384")
PARITY_DEADLINE_S = 240
E2E_DEADLINE_S = 120  # the generation cases at serving sizes (and a real server); by name: all that is left
SANITIZER_TIMEOUT_S = 200
SANITIZER_LEAST_S = 60  # what the sanitizers are given even when the run's budget is nearly spent
# issue 11's shapes under Nsight Compute: short and long prefixes, a big tree, many heads
# q9 p128k since run 7: 15 % faster cold for a merge change that did not move q9 p32k, and no profile says why
NCU_CASES = (SWEEP_SUITE, "q9-p4096", "q9-p32768", "q9-p131072", "q65-p4096", "dsv3")
# under the device tool's 600 s a command, with room for the set-up before the clock starts
BUDGET_S = float(os.environ.get("DDBENCH_DEVICE_BUDGET_S", "540"))
STEPS = os.environ.get("DDBENCH_DEVICE_STEPS")  # comma-separated: run only these steps (and the build)
# the calibration's emulated counters on the GPU machine's CPUs (95 s on an H200's)
CALIBRATION_RESERVE_S = 120


def _gpu_backends(path: str) -> tuple[str, ...]:
    """The built-in backends the suite's bounds name, with the hardware kernel in place of its emulation
    (not `candidate`: that set judges a user's plug-in, which a device run has none of)."""
    names = [n for c in load_suite_file(path).cases for b in c.parity for n in (b.candidate, b.against)]
    swapped = ("cuda" if n == "cuda-emu" else n for n in [*names, "cuda"] if n != ANY_BACKEND)
    return tuple(n for n in dict.fromkeys(swapped) if n in BUILTINS)


def _gpu_session(path: str, expression: str | None, **options: Any) -> Session:
    backends = _gpu_backends(path)
    return Session(
        SessionOptions(suites=(path,), filter_expr=expression, backends=backends, device="cuda", **options)
    )


def _first_ids(path: str, *expressions: str) -> list[str]:
    return [suite_cases(path, e)[0].id for e in expressions]


def step_build() -> dict[str, Any]:
    builds = build_all()
    status = get_backend("cuda").availability()
    return {
        "ok": status.ok and all(b["ok"] for b in builds.values()),
        "detail": status.detail,
        "builds": builds,
    }


def step_ceilings() -> dict[str, Any]:
    """The DRAM copy rate (bytes read plus written, 2 GiB each way), the ceiling memory-bound cases meet."""
    source = torch.empty(2**31, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    median = sorted(times[2:])[len(times[2:]) // 2]
    del source, target
    torch.cuda.empty_cache()
    return {"ok": True, "copy_gbs": round(2 * 2**31 / median / 1e9, 1), "samples": len(times) - 2}


def step_primitives(out_dir: Path) -> dict[str, Any]:
    from ddbench.device.fragments import compare, random_probe_data, run_emulated, run_hardware, save_raw

    data = random_probe_data(trials=256, seed=11)
    emulated, hardware = run_emulated(data), run_hardware(data)
    save_raw(out_dir / "fragments.pt", data, emulated, hardware)
    return compare(data, emulated, hardware)


def step_parity(out_dir: Path, seconds: float) -> dict[str, Any]:
    deadline = time.perf_counter() + seconds
    summary: dict[str, Any] = {"suites": {}, "worst_max_row_ulp": {}, "failures": [], "truncated": False}
    for path, expression in PARITY_SUITES:
        session = _gpu_session(path, expression)
        facts = RunFacts([path], environment(), None, expression)
        sink = ResultsFileSink(out_dir / f"parity-{Path(path).stem}.json", facts)
        outcome = session.run([sink], deadline=deadline)
        summary["truncated"] |= not outcome.complete
        summary["suites"][path] = {**outcome.summary, "verdict": outcome.verdict}
        for result in outcome.results:
            if result.status.failed:
                summary["failures"].append(
                    {
                        "case": result.case.id,
                        "pairs": [p.to_json() for p in result.pairs],
                        "error": result.error,
                    }
                )
            for pair in result.pairs:
                if pair.figures is not None:
                    key = f"{pair.candidate} vs {pair.against}"
                    worst = summary["worst_max_row_ulp"].get(key, 0.0)
                    summary["worst_max_row_ulp"][key] = max(worst, pair.figures.max_row_ulp)
    bundle(out_dir, [f"parity-{Path(path).stem}.json" for path, _ in PARITY_SUITES], "parity.zip")
    # Cut short by the deadline, or nothing judged in a suite, is not ok: only a passed verdict everywhere.
    summary["ok"] = not summary["failures"] and all(
        s["verdict"] == "passed" for s in summary["suites"].values()
    )
    return summary


def _start_sanitizer(tool: str, case_ids: list[str]) -> subprocess.Popen[str] | str:
    """compute-sanitizer over the cuda backend on the given cases, started in the background (or why not)."""
    sanitizer = find_cuda_tool("compute-sanitizer")
    if sanitizer is None:
        return "compute-sanitizer not found (PATH, /usr/local/cuda/bin, /opt/nvidia)"
    cmd = [
        sanitizer,
        "--tool",
        tool,
        "--error-exitcode",
        "9",
        sys.executable,
        "-m",
        "ddbench.device.sanitize",
    ]
    # Each tensor its own allocation, so memcheck sees a read past a buffer, not into the caching pool.
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    return subprocess.Popen(
        [*cmd, SANITIZER_CASES[0], *case_ids],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


# memcheck ends "ERROR SUMMARY: 0 errors"; racecheck "RACECHECK SUMMARY: 0 hazards displayed (0 errors, ...)"
_SUMMARY = re.compile(
    r"ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?"
)


def sanitizer_errors(output: str) -> list[int]:
    """The error counts of every summary line compute-sanitizer printed (none: it did not finish)."""
    return [int(a or b) for a, b in _SUMMARY.findall(output)]


def _sanitizer_verdict(started: subprocess.Popen[str] | str, deadline: float) -> dict[str, Any]:
    if isinstance(started, str):
        return {"ok": False, "unavailable": started}
    try:
        output, _ = started.communicate(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        started.kill()
        output, _ = started.communicate()
        return {"ok": False, "error": f"timed out after {SANITIZER_TIMEOUT_S} s", "tail": output[-3000:]}
    errors = sanitizer_errors(output)
    return {
        "ok": started.returncode == 0 and bool(errors) and not any(errors),
        "returncode": started.returncode,
        "errors": errors,
        "tail": output[-3000:],
    }


def step_parity_and_sanitizer(out_dir: Path, seconds: float) -> dict[str, Any]:
    """Parity of the suites while memcheck and racecheck run beside it: neither times anything."""
    ids = _first_ids(*SANITIZER_CASES)
    started = {tool: _start_sanitizer(tool, ids) for tool in ("memcheck", "racecheck")}
    deadline = time.perf_counter() + min(SANITIZER_TIMEOUT_S, max(seconds, SANITIZER_LEAST_S))
    try:
        parity = step_parity(out_dir, seconds)
    except BaseException:  # never leave them running on the GPU under the steps that time it
        for process in started.values():
            if not isinstance(process, str):
                process.kill()
                process.communicate()
        raise
    sanitizer = {tool: _sanitizer_verdict(s, deadline) for tool, s in started.items()}
    sanitizer = {"cases": ids, **sanitizer, "ok": all(r["ok"] for r in sanitizer.values())}
    return {"ok": parity["ok"] and sanitizer["ok"], "parity": parity, "sanitizer": sanitizer}


def step_calibration(out_dir: Path, latency: dict[str, Any]) -> dict[str, Any]:
    """The model's measured error on the latency cases, written as `calibration.json` (commit it as
    ddbench/model/calibration.json); ddbench/device/calibrate.py says how."""
    date = datetime.now(timezone.utc).date().isoformat()
    return calibrate(
        torch.cuda.get_device_name(), latency.get("rows", []), out_dir / "calibration.json", date
    )


def main() -> int:
    started_at = time.perf_counter()
    out_dir = Path(os.environ.get("OUT") or "results/device")

    def left() -> float:
        return BUDGET_S - (time.perf_counter() - started_at)

    def parity_seconds() -> float:  # parity before the calibration, which any machine can redo
        return max(0.0, min(PARITY_DEADLINE_S, left()))

    def e2e_seconds() -> float:  # the rest of the run when the step was asked for by name
        return left() if STEPS else min(E2E_DEADLINE_S, left())

    # (name, step, the seconds it needs left to start: what cannot finish is skipped, saying so)
    steps: list[tuple[str, Callable[[], dict[str, Any]], float]] = [
        ("build", step_build, 0),
        ("serving", step_serving, 0),
        ("primitives", lambda: step_primitives(out_dir), 0),
        ("ceilings", step_ceilings, 0),
        ("latency", lambda: step_latency(out_dir, _gpu_session, time.perf_counter() + left()), 1),
        ("parity+sanitizer", lambda: step_parity_and_sanitizer(out_dir, parity_seconds()), 1),
        ("e2e", lambda: step_e2e(out_dir, e2e_seconds(), _gpu_session), 60),
        ("sweep", step_plan_sweep, 30),
        ("ncu", lambda: step_ncu(out_dir, NCU_CASES[0], _first_ids(*NCU_CASES), left()), 60),
        (
            "calibration",
            lambda: step_calibration(out_dir, report["steps"].get("latency", {})),
            CALIBRATION_RESERVE_S,
        ),
    ]
    names = [name for name, _, _ in steps]
    chosen = {"build", *(n.strip() for n in STEPS.split(","))} if STEPS else set(names)
    if unknown := sorted(chosen - set(names)):
        print(f"device-check: DDBENCH_DEVICE_STEPS: unknown steps {unknown}; steps: {', '.join(names)}")
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(),
        "budget_s": BUDGET_S,
        "steps": {},
    }
    path = out_dir / "device-check.json"
    if not torch.cuda.is_available():
        report["unavailable"] = "no CUDA GPU here (torch.cuda.is_available() is False)"
        write_json_atomic(path, report)
        print(f"device-check: unavailable: {report['unavailable']}")
        return 3
    for name, step, needs in steps:
        if name not in chosen:
            continue
        if left() < needs:
            why = f"{left():.0f} s of the run's {BUDGET_S:.0f} s left, {needs:.0f} s needed"
            if name == "calibration":
                why += "; run `python -m ddbench.device.calibrate device-check.json` on any machine"
            report["steps"][name] = {"ok": False, "skipped": why}
            write_json_atomic(path, report)
            print(f"device-check: {name}: SKIPPED ({why})", flush=True)
            continue
        start = time.perf_counter()
        try:
            result = step()
        except Exception as err:  # one broken step must not hide the others' results
            result = {
                "ok": False,
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()[-4000:],
            }
        result["seconds"] = round(time.perf_counter() - start, 1)
        report["steps"][name] = result
        write_json_atomic(path, report)
        print(
            f"device-check: {name}: {'ok' if result.get('ok') else 'FAIL'} ({result['seconds']} s)",
            flush=True,
        )
    for row in report["steps"].get("latency", {}).get("rows", []):
        print(
            f"  {row['case']}: {row.get('status', row.get('error'))}: "
            f"cuda {row.get('cuda_median_us', '-')} us, "
            f"triton {row.get('triton_median_us', '-')} us, ratio {row.get('ratio_cuda_over_triton', '-')}"
        )
    return 0 if all(s.get("ok") for s in report["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

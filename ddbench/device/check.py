"""The device script (`make device-check`): everything that needs a GPU, in one run of a few minutes.

Steps: build the kernel for the local arch; the emulated warp primitives against the hardware's; parity of
cuda vs triton vs the references on the smoke suite, the kernel suite and a GPU-sized subset; the sanitizer's
memcheck and racecheck on two small cases; a short latency table cuda vs triton; the model's measured error
on those cases ($OUT/calibration.json, to commit as ddbench/model/calibration.json). Each step's result is
written to $OUT/device-check.json (or results/device/) as soon as it ends, so a timeout keeps what finished.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
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
from ddbench.environment import environment
from ddbench.inputs.suite_file import load_suite_file
from ddbench.runner import Session, SessionOptions
from ddbench.runner.sinks import ResultsFileSink, RunFacts
from ddbench.suite import Case
from ddbench.suite.model import ANY_BACKEND
from ddbench.suite.select import case_filter
from ddbench.timing.settings import TimingSettings

PARITY_SUITES = (
    ("suites/smoke.json", None),
    ("suites/kernel-parity.json", None),
    ("suites/k26-verify.json", "gpu and full and tp8 and bs4 and (p4096 or p32768)"),
)
# a 32-row launch, a ragged batch, and a 48-row launch whose combine runs in two halves (16k keys)
SANITIZER_CASES = ("suites/kernel-parity.json", "q1 and p500", "ragged and ddtree", "long and p16384")
LATENCY_CASES = (
    ("suites/k26-tp8-parity.json", ""),
    ("suites/k26-verify.json", "full and tp8 and bs1 and p4096 and ddtree-b16"),
    ("suites/k26-verify.json", "full and tp8 and bs4 and p32768 and ddtree-b64"),
    ("suites/k26-verify.json", "full and deepseek and bs16 and p32768 and chain16"),
    # issue 11's target shapes (docs/model.md): measured beside their modeled figures in the calibration step
    ("suites/model-report.json", "q9 and bs1 and p32768"),
    ("suites/model-report.json", "q65 and p4096"),
    ("suites/model-report.json", "bs16"),
)
PARITY_DEADLINE_S = 240
LATENCY_SETTINGS = TimingSettings(mode="graph", max_seconds=2.0, target_rel_noise=0.01)
SANITIZER_TIMEOUT_S = 150


def _cases(path: str, expression: str | None) -> list[Case]:
    keep = case_filter(expression)
    return [c for c in load_suite_file(path).cases if keep(c)]


def _gpu_backends(path: str) -> tuple[str, ...]:
    """What the suite's bounds name, with the hardware kernel in place of its emulation."""
    names = [n for c in load_suite_file(path).cases for b in c.parity for n in (b.candidate, b.against)]
    swapped = ("cuda" if n == "cuda-emu" else n for n in [*names, "cuda"] if n != ANY_BACKEND)
    return tuple(dict.fromkeys(swapped))


def _gpu_session(path: str, expression: str | None, **options: Any) -> Session:
    backends = _gpu_backends(path)
    return Session(
        SessionOptions(suites=(path,), filter_expr=expression, backends=backends, device="cuda", **options)
    )


def step_build() -> dict[str, Any]:
    start = time.perf_counter()
    status = get_backend("cuda").availability()
    return {"ok": status.ok, "detail": status.detail, "seconds": round(time.perf_counter() - start, 1)}


def step_primitives() -> dict[str, Any]:
    from ddbench.device.fragments import compare, random_probe_data, run_emulated, run_hardware

    data = random_probe_data(trials=256, seed=11)
    return compare(run_emulated(data), run_hardware(data))


def step_parity(out_dir: Path) -> dict[str, Any]:
    deadline = time.perf_counter() + PARITY_DEADLINE_S
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
    # Cut short by the deadline, or nothing judged in a suite, is not ok: only a passed verdict everywhere.
    summary["ok"] = not summary["failures"] and all(
        s["verdict"] == "passed" for s in summary["suites"].values()
    )
    return summary


def _sanitize(tool: str, case_ids: list[str]) -> dict[str, Any]:
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(sanitizer).exists():
        return {"ok": False, "unavailable": "compute-sanitizer not found"}
    cmd = [
        sanitizer,
        "--tool",
        tool,
        "--error-exitcode",
        "9",
        sys.executable,
        "-m",
        "ddbench.device.sanitize",
        SANITIZER_CASES[0],
        *case_ids,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SANITIZER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {SANITIZER_TIMEOUT_S} s"}
    output = proc.stdout + proc.stderr
    errors = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", output)]
    return {
        "ok": proc.returncode == 0 and bool(errors) and not any(errors),
        "returncode": proc.returncode,
        "errors": errors,
        "tail": output[-3000:],
    }


def step_sanitizer() -> dict[str, Any]:
    path, *expressions = SANITIZER_CASES
    ids = [_cases(path, e)[0].id for e in expressions]
    reports = {tool: _sanitize(tool, ids) for tool in ("memcheck", "racecheck")}
    return {"cases": ids, **reports, "ok": all(r["ok"] for r in reports.values())}


def step_latency() -> dict[str, Any]:
    """cuda vs triton, interleaved, in CUDA-graph mode: the Session's own timing on a few GPU-sized cases."""
    rows = []
    for path, expression in LATENCY_CASES:
        session = _gpu_session(
            path,
            expression or None,
            timing=True,
            timing_mode="graph",
            timing_settings=LATENCY_SETTINGS,
            ratios=(("cuda", "triton"),),
        )
        for case in session.cases[:1]:
            result = session.run_case(case)
            if result.timing is None:
                rows.append({"case": case.id, "error": result.error or "not timed"})
                continue
            measured, ratios = result.timing.measurements, result.timing.ratios
            rows.append(
                {
                    "case": case.id,
                    "status": str(result.status),
                    **{f"{n}_median_us": round(m.stats.median_us, 2) for n, m in measured.items()},
                    **{f"{n}_iqr_us": round(m.stats.iqr_us, 2) for n, m in measured.items()},
                    **{f"{n}_mode": m.mode for n, m in measured.items()},
                    "ratio_cuda_over_triton": round(ratios[0].median, 3) if ratios else None,
                }
            )
    timed_both = all("cuda_median_us" in r and "triton_median_us" in r for r in rows)
    return {"ok": bool(rows) and timed_both and all(r.get("status") == "pass" for r in rows), "rows": rows}


def step_calibration(out_dir: Path, latency: dict[str, Any]) -> dict[str, Any]:
    """The model against this GPU: each latency case's measured cuda median (CUDA graph) against the model's
    figure from the emulation's counters; the estimated table constants fitted to those times; written as
    `calibration.json` in the committed format (commit it as ddbench/model/calibration.json)."""
    from ddbench.model.calibration import CaseError, fit_constants, measured_entry, with_entry
    from ddbench.model.gpus import gpu_key_of_device, gpu_spec
    from ddbench.runner.emulated_counters import emulated_counters
    from ddbench.runner.model_profiles import CALIBRATION_FILE, calibration_of, model_cases, registers_of

    name = torch.cuda.get_device_name()
    key = gpu_key_of_device(name)
    if key is None:
        return {"ok": False, "unavailable": f"the model has no table for {name}"}
    gpu = gpu_spec(key)
    measured = {r["case"]: r["cuda_median_us"] for r in latency.get("rows", []) if "cuda_median_us" in r}
    cases = [c for path, expression in LATENCY_CASES for c in _cases(path, expression or None)[:1]]
    cases = [c for c in cases if c.id in measured]
    if not cases:
        return {"ok": False, "error": "no case has a measured cuda time to calibrate with"}
    counters = {c.id: emulated_counters(c, gpu, sanitize=False) for c in cases}  # counted once, refitted
    registers = registers_of(gpu.arch)

    def modeled_us(spec: Any) -> list[float]:
        uncalibrated = calibration_of(gpu)
        profiles = model_cases(
            cases, spec, uncalibrated, launch_mode="graph", given=counters, registers=registers
        )
        return [p.launch.modeled_us for p in profiles.profiles]

    times = [measured[c.id] for c in cases]
    constants = fit_constants(gpu, times, modeled_us)
    after = modeled_us(dataclasses.replace(gpu, **constants))
    errors = [CaseError(c.id, t, m) for c, t, m in zip(cases, times, after, strict=True)]
    date = datetime.now(timezone.utc).date().isoformat()
    entry = measured_entry(f"measured on {name}, {date} ({len(cases)} cases)", errors, constants)
    document = with_entry(json.loads(CALIBRATION_FILE.read_text()), key, entry)
    write_json_atomic(out_dir / "calibration.json", document)
    return {"ok": True, "gpu": key, "constants": entry["constants"], "errors": entry["errors"]}


def main() -> int:
    out_dir = Path(os.environ.get("OUT") or "results/device")
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(),
        "steps": {},
    }
    path = out_dir / "device-check.json"
    if not torch.cuda.is_available():
        report["unavailable"] = "no CUDA GPU here (torch.cuda.is_available() is False)"
        write_json_atomic(path, report)
        print(f"device-check: unavailable: {report['unavailable']}")
        return 3
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("build", step_build),
        ("primitives", step_primitives),
        ("parity", lambda: step_parity(out_dir)),
        ("sanitizer", step_sanitizer),
        ("latency", step_latency),
        ("calibration", lambda: step_calibration(out_dir, report["steps"].get("latency", {}))),
    ]
    for name, step in steps:
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

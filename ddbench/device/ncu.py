"""Nsight Compute over the hardware kernel: what the GPU's own counters say of a launch.

The emulation's counters are exact for what the kernel asks of memory (bytes, sectors, shared wavefronts,
bank conflicts, mma); the model turns them into time. ncu reads the same quantities, and the limits the model
can only assume (pipe utilisation, warp stall reasons, achieved occupancy), off the hardware: the check of
both. The launch runs under `ncu --set full` (clocks left as the GPU sets them: --clock-control none), and
the report is exported as CSV into `ncu.zip`: `ncu-raw.csv` (every metric, one row a kernel),
`ncu-details.csv` (the sections as ncu prints them) and `ncu-source.csv` (per SASS instruction: where the
warps stalled).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ddbench.device.bundle import bundle
from ddbench.device.cases import find_cuda_tool
from ddbench.kernel.cuda_build import kernel_sources_hash

KERNELS = "regex:verify_attention_kernel|combine_parts_kernel"
TIMEOUT_S = 240
EXPORTS = (("raw", ()), ("details", ()), ("source", ("--print-source", "sass")))


def _run(cmd: list[str], seconds: float, out: Path | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, seconds), check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {seconds:.0f} s"}
    if out is not None and proc.returncode == 0:
        out.write_text(proc.stdout)
    tail = (proc.stdout[-1500:] if out is None else "") + proc.stderr[-1500:]
    return {"ok": proc.returncode == 0, "returncode": proc.returncode, "tail": tail,
            "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip


def step_ncu(out_dir: Path, suite: str, case_ids: list[str], seconds: float = TIMEOUT_S) -> dict[str, Any]:
    """Profile the cuda backend's kernels on the given cases of `suite`; CSV exports into `out_dir`."""
    ncu = find_cuda_tool("ncu")
    if ncu is None:
        return {
            "ok": False,
            "unavailable": "ncu not found (PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute)",
        }
    deadline = time.perf_counter() + seconds
    report = Path(tempfile.mkdtemp(prefix="ddbench-ncu-")) / "verify.ncu-rep"  # not a file to return
    target = [sys.executable, "-m", "ddbench.device.sanitize", suite, *case_ids]
    profile = [ncu, "--clock-control", "none", "--target-processes", "all", "--kernel-name", KERNELS]
    profile += ["--set", "full", "-f", "-o", str(report.with_suffix("")), *target]
    # the suite and the kernel the cases ran: what `python -m ddbench.device.instruction_ratio` counts against
    result: dict[str, Any] = {"suite": suite, "cases": case_ids, "kernel_hash": kernel_sources_hash()}
    result["profile"] = _run(profile, deadline - time.perf_counter())
    if not result["profile"]["ok"]:
        return {**result, "ok": False}
    for page, extra in EXPORTS:
        cmd = [ncu, "--import", str(report), "--csv", "--page", page, *extra]
        result[page] = _run(cmd, deadline - time.perf_counter(), out_dir / f"ncu-{page}.csv")
    result["ok"] = all(result[page]["ok"] for page, _ in EXPORTS[:2])  # the source page is a bonus
    bundle(out_dir, [f"ncu-{page}.csv" for page, _ in EXPORTS], "ncu.zip")
    return result

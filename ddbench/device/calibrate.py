"""The model against a GPU's measured times: fit the table's estimated constants, state the error left.

The device check's latency rows give each case's measured cuda median (a CUDA-graph replay on a cold L2, as
the model models one launch: its unique bytes from DRAM, a graph node's overhead); the emulation's counters
of the same cases (CPU work, the same on any machine) give the model's figure. The fit starts from the
datasheet table, never from a committed calibration, so a refit does not build on the last one. The entry
is written in the committed format (ddbench/model/calibration.json).

    python -m ddbench.device.calibrate DEVICE_CHECK_JSON [OUT_JSON]

redoes the step on any machine from a device run's device-check.json (default output: calibration.json
beside it), for when the lease ended before the step ran there.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.device.latency import latency_cases
from ddbench.errors import BackendUnavailable, InputError
from ddbench.gpus import GpuSpec, gpu_key_of_device, gpu_spec
from ddbench.model.calibration import UNCALIBRATED, CaseError, fit_constants, measured_entry, with_entry
from ddbench.model.profile import CaseProfile
from ddbench.runner import Session, SessionOptions
from ddbench.runner.model_profiles import CALIBRATION_FILE
from ddbench.runner.modeled_run import ModelRequest

MEASURED = "cold_cuda_median_us"  # the latency row's figure the model is fitted to
TRITON_MEASURED = "cold_triton_median_us"  # and the Triton model's scale


def calibrate(
    device_name: str, rows: Sequence[Mapping[str, Any]], out_file: Path, date: str
) -> dict[str, Any]:
    """Fit on the rows with a measured cold-L2 cuda median; write the calibration document to `out_file`."""
    key = gpu_key_of_device(device_name)
    if key is None:
        return {"ok": False, "unavailable": f"the model has no table for {device_name}"}
    gpu = gpu_spec(key)
    passed = [r for r in rows if r.get("cold_status") == "pass"]  # a kernel whose parity failed is no datum
    measured = {r["case"]: r[MEASURED] for r in passed if MEASURED in r}
    picked = [(path, c) for path, c in latency_cases() if c.id in measured]
    if not picked:
        return {"ok": False, "error": "no case has a measured cuda time to calibrate with"}
    cases = [c for _, c in picked]
    # counted once (a modeled run of the Session), refitted many times on the same counts
    options = SessionOptions(
        suites=tuple(dict.fromkeys(path for path, _ in picked)),
        case_ids=tuple(c.id for c in cases),
        model=ModelRequest(key, launch_mode="graph", keep_counters=True),
    )
    counted = Session(options).run_modeled()

    def profiles(spec: GpuSpec) -> list[CaseProfile]:
        return counted.remodel(spec, UNCALIBRATED)

    def modeled_us(spec: GpuSpec) -> list[float]:
        return [p.launch.modeled_us for p in profiles(spec)]

    times = [measured[c.id] for c in cases]
    before = modeled_us(gpu)
    constants = fit_constants(gpu, times, modeled_us)
    fitted = dataclasses.replace(gpu, **constants)
    after = modeled_us(fitted)
    triton = {r["case"]: r[TRITON_MEASURED] for r in passed if TRITON_MEASURED in r and r["case"] in measured}
    triton_scale = _triton_scale(profiles(fitted), triton)
    if triton_scale is not None:
        constants["triton_time_scale"] = triton_scale
    errors = [CaseError(c.id, t, m) for c, t, m in zip(cases, times, after, strict=True)]
    entry = measured_entry(f"measured on {device_name}, {date} ({len(cases)} cases)", errors, constants)
    document = with_entry(json.loads(CALIBRATION_FILE.read_text()), key, entry)
    write_json_atomic(out_file, document)
    scaled = profiles(dataclasses.replace(fitted, triton_time_scale=triton_scale or 1.0))
    return {
        "ok": True,
        "gpu": key,
        # how the issue term was counted (docs/model.md): a fit by ratio (no nvcc, nvdisasm or scipy where it
        # ran) is redone on a machine that has them before it is committed
        "issue_counted": sorted({k.issue.method for p in scaled for k in p.launch.kernels if k.issue}),
        "constants": entry["constants"],
        "errors": entry["errors"],
        "uncalibrated_modeled_us": {c.id: round(m, 3) for c, m in zip(cases, before, strict=True)},
        "triton_errors": [
            {"case": p.case_id, "measured_us": triton[p.case_id], "modeled_us": round(p.triton_us, 3)}
            for p in scaled
            if p.case_id in triton
        ],
    }


def _triton_scale(profiles: list[CaseProfile], measured: dict[str, float]) -> float | None:
    """The factor on the Triton model's kernel time (its launch overhead apart) that makes the geometric mean
    of modeled/measured 1, found by bisection in [1/16, 16]; None without a measured Triton time."""
    pairs = [
        (p.triton.modeled_us, p.triton_overhead_us, measured[p.case_id])
        for p in profiles
        if p.case_id in measured
    ]
    if not pairs:
        return None

    def misfit(scale: float) -> float:
        return sum(math.log((scale * k + o) / t) for k, o, t in pairs)

    lo, hi = 1 / 16, 16.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if misfit(mid) < 0 else (lo, mid)
    return round(math.sqrt(lo * hi), 4)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m ddbench.device.calibrate DEVICE_CHECK_JSON [OUT_JSON]", file=sys.stderr)
        return 2
    source = Path(argv[0])
    try:
        report = json.loads(source.read_text())
        device = report["environment"]["device"]["name"]
        rows = report["steps"]["latency"]["rows"]
        date = report["started"][:10]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"{source}: not a device check's report with latency rows: {err}", file=sys.stderr)
        return 2
    out = Path(argv[1]) if len(argv) == 2 else source.with_name("calibration.json")
    try:
        result = calibrate(device, rows, out, date)
    except BackendUnavailable as err:  # the emulation cannot be built here: it gives the counters
        print(f"calibrate: unavailable: {err}", file=sys.stderr)
        return 3
    except InputError as err:  # e.g. a committed calibration.json that does not parse
        print(f"calibrate: {err.message}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

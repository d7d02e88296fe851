"""The device check's latency table and the baselines it makes: cuda vs triton, interleaved, CUDA graphs.

Each case goes through the Session like any timed run: judged for parity first, then both kernels timed in
the same rounds. A case whose parity passed and whose noise was under its limit becomes a baseline entry,
exactly as `ddbench baseline update` would store it; the files land in the output folder as
`baseline-<suite>.json`, to be committed as `baselines/<device>/<suite>.json`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddbench.baselines.device import device_key
from ddbench.baselines.entries import baseline_entries, refusals
from ddbench.baselines.store import BaselineFile, load_baseline, save_baseline
from ddbench.device.cases import suite_cases
from ddbench.environment import environment
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.metrics.verdict import FAIL
from ddbench.results.case_result import CaseResult
from ddbench.runner import Session
from ddbench.suite import Case
from ddbench.timing.settings import TimingSettings

# (suite, -k expression, how many of the cases it selects: None for all)
LATENCY_CASES: tuple[tuple[str, str, int | None], ...] = (
    # issue 11's target shapes (docs/model.md), measured beside their modeled figures
    ("suites/model-report.json", "", None),
    ("suites/k26-tp8-parity.json", "", 1),
    ("suites/k26-verify.json", "full and tp8 and bs1 and p4096 and ddtree-b16", 1),
    ("suites/k26-verify.json", "full and tp8 and bs4 and p32768 and ddtree-b64", 1),
    ("suites/k26-verify.json", "full and deepseek and bs16 and p32768 and chain16", 1),
)
LATENCY_SETTINGS = TimingSettings(mode="graph", max_seconds=2.0, target_rel_noise=0.01)
# Each case twice: as the suites' budgets time it (graph replays; these become the baselines), and with the
# L2 flushed before each replay, as serving meets a layer's launch (the figure the model is calibrated on).
MODES = ("graph", "graph-cold-l2")
TIMED = ("cuda", "triton")

SessionFactory = Callable[..., Session]


def latency_figures(result: CaseResult, prefix: str = "") -> dict[str, Any]:
    """Medians, spreads, the interleaved ratio and the SM clocks seen, keys prefixed by `prefix`."""
    if result.timing is None:
        return {f"{prefix}error": result.error or "not timed"}
    measured, ratios = result.timing.measurements, result.timing.ratios
    row: dict[str, Any] = {f"{prefix}status": str(result.status)}
    failed = [f"{c.kind} {c.subject}: {c.detail}" for c in result.timing.verdict.checks if c.status == FAIL]
    failed += [
        f"{p.candidate} vs {p.against}: {'; '.join(p.verdict.reasons) or p.verdict.status}"
        for p in result.pairs
        if p.verdict.failed
    ]
    if failed:
        row[f"{prefix}failed"] = failed
    for name, m in measured.items():
        row[f"{prefix}{name}_median_us"] = round(m.stats.median_us, 2)
        row[f"{prefix}{name}_iqr_us"] = round(m.stats.iqr_us, 2)
        row[f"{prefix}{name}_samples"] = m.stats.samples
        row[f"{prefix}{name}_mode"] = m.mode
        if m.sm_clock_mhz:
            row[f"{prefix}{name}_sm_clock_mhz"] = [min(m.sm_clock_mhz), max(m.sm_clock_mhz)]
    ratio = next((r for r in ratios if (r.candidate, r.baseline) == TIMED), None)
    row[f"{prefix}ratio_cuda_over_triton"] = round(ratio.median, 3) if ratio else None
    return row


def step_latency(out_dir: Path, session_for: SessionFactory, deadline: float | None = None) -> dict[str, Any]:
    """Times every latency case in both modes (until `deadline`, a perf_counter time); writes the baselines
    of those whose graph-mode result may become one."""
    rows: list[dict[str, Any]] = []
    stored: dict[str, int] = {}
    env, kernel_hash = environment(), kernel_sources_hash()
    for path, expression, limit in LATENCY_CASES:
        sessions = [
            session_for(
                path,
                expression or None,
                timing=True,
                timing_mode=mode,
                timing_settings=LATENCY_SETTINGS,
                ratios=(TIMED,),
                timed_backends=TIMED,
            )
            for mode in MODES
        ]
        (suite,) = sessions[0].suites
        target = out_dir / f"baseline-{suite.name}.json"
        for case in sessions[0].cases[:limit]:
            if deadline is not None and time.perf_counter() > deadline:
                return {"ok": False, "rows": rows, "baselines": stored, "truncated": True}
            graph, cold = (s.run_case(case) for s in sessions)
            row = {"case": case.id, **latency_figures(graph), **latency_figures(cold, "cold_")}
            reasons = refusals(graph)
            if reasons:
                row["baseline"] = [str(r) for r in reasons]
            else:
                baseline = _stored(target, device_key(sessions[0].device), suite.name)
                baseline.entries[case.id] = baseline_entries(graph, env, kernel_hash)
                save_baseline(target, baseline)
                stored[suite.name] = len(baseline.entries)
                row["baseline"] = "stored"
            rows.append(row)
    timed = all(f"{p}{n}_median_us" in r for r in rows for n in TIMED for p in ("", "cold_"))
    passed = all(r.get("status") == r.get("cold_status") == "pass" for r in rows)
    return {"ok": bool(rows) and timed and passed, "rows": rows, "baselines": stored}


def _stored(path: Path, device: str, suite: str) -> BaselineFile:
    return load_baseline(path, device=device, suite=suite) or BaselineFile(device, suite)


def latency_cases() -> list[tuple[str, Case]]:
    """(suite, case) of every case the latency step times, in its order (no GPU needed)."""
    return [
        (path, c) for path, expression, limit in LATENCY_CASES for c in suite_cases(path, expression)[:limit]
    ]

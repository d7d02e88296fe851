"""The device check's generation step: suites/e2e.json's `gpu` cases, and a real server where one can run.

The generation cases at serving sizes run `cuda` and compiled Triton through the Session, judged by the
same gates as on the CPU ($OUT/e2e-gpu.json). `ddbench server-parity` then runs when the machine has a
local model folder (`DDBENCH_SERVER_MODEL`) and SGLang's serving stack; otherwise the step says which of
the two is missing, as the command itself does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddbench.environment import environment
from ddbench.runner import Session
from ddbench.runner.sinks import ResultsFileSink, RunFacts

E2E_SUITE = "suites/e2e.json"
E2E_CASES = "gpu"
SERVER_MODEL_ENV = "DDBENCH_SERVER_MODEL"


def step_e2e(
    out_dir: Path, seconds: float, session_for: Callable[[str, str | None], Session]
) -> dict[str, Any]:
    deadline = time.perf_counter() + seconds
    session = session_for(E2E_SUITE, E2E_CASES)
    facts = RunFacts([E2E_SUITE], environment(), None, E2E_CASES)
    outcome = session.run([ResultsFileSink(out_dir / "e2e-gpu.json", facts)], deadline=deadline)
    cases = {
        result.case.id: {
            "status": str(result.status),
            "error": result.error,
            "pairs": {
                f"{p.candidate} vs {p.against}": {g.gate: g.status for g in p.gates} for p in result.pairs
            },
            "runs": (result.generation.to_json()["runs"] if result.generation else {}),
        }
        for result in outcome.results
    }
    summary: dict[str, Any] = {
        "suite": E2E_SUITE,
        "cases": cases,
        **outcome.summary,
        "verdict": outcome.verdict,
        "complete": outcome.complete,
    }
    summary["server_parity"] = _server_parity(out_dir, deadline)
    summary["ok"] = outcome.verdict == "passed" and summary["server_parity"].get("status") in (None, "pass")
    return summary


def _server_parity(out_dir: Path, deadline: float) -> dict[str, Any]:
    model = os.environ.get(SERVER_MODEL_ENV)
    if not model:
        return {"skipped": f"no local model folder given ({SERVER_MODEL_ENV}); nothing was started"}
    from ddbench.errors import DdbenchError
    from ddbench.runner.server_parity import ServerParityRequest, run_server_parity

    left = max(1.0, deadline - time.perf_counter())
    request = ServerParityRequest(
        Path(model), out_dir / "server-parity", ready_timeout_s=left / 2, generate_timeout_s=left / 4
    )
    try:
        report = run_server_parity(request)
    except DdbenchError as err:
        return {"status": "error", "reasons": [err.message]}
    return {"status": report.status, "reasons": report.reasons(), "report": "server-parity/report.json"}

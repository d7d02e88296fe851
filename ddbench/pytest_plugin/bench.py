"""A suite's cases × backends as benchmark tests: the Session behind the pytest plugin, free of pytest hooks.

The plugin makes one Session when pytest starts, so it refuses what `ddbench run` refuses (a backend no bound
judges, an unavailable one is a skip with its reason) and runs cases the same way. Each test is one case on
one backend: parity runs once per case (every backend of the case, every bound judged, failures explained)
and is cached, so N backends cost one parity run; a candidate's test fails when any bound judging it failed
or when no bound could judge it here; a reference's test fails when it crashed. Timing then belongs to
pytest-benchmark, on the backend's prepared launch (marshaling outside the timed call).

Under pytest-xdist each worker makes its own Session: with several GPUs the worker's index picks its device
(`gw3` on 2 GPUs -> cuda:1), and `--dist loadgroup` keeps a case's tests on one worker (one parity run).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import torch

from ddbench.backends import Backend, prepared
from ddbench.inputs import generate_inputs
from ddbench.metrics.status import Status
from ddbench.results.case_result import CaseResult
from ddbench.runner import Session, SessionOptions
from ddbench.runner.roles import Role
from ddbench.runner.sinks import Sink
from ddbench.suite.ids import workload_hash
from ddbench.suite.model import Case


def worker_device(worker: str | None = None, gpus: int | None = None) -> str | None:
    """The device of a pytest-xdist worker (`gw<i>`): GPU i mod the GPU count; None off xdist or the GPU."""
    worker = worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER")
    gpus = gpus if gpus is not None else (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit() or gpus < 1:
        return None
    return f"cuda:{int(worker[2:]) % gpus}"


class SuiteBench:
    """The plugin's Session, its tests, cached parity per case, and the timing settings."""

    def __init__(
        self,
        options: SessionOptions,
        rounds: int,
        warmup: int,
        sinks: Sequence[Sink] = (),
    ) -> None:
        device = options.device or worker_device()
        self.session = Session(options if device is None else _with_device(options, device))
        self.device = self.session.device
        self.rounds, self.warmup = rounds, warmup
        self.sinks = list(sinks)
        self.params = [
            CaseBackend(self, case, name)
            for case in self.session.cases
            for name in self.session.roster[case.id]
        ]
        self._parity: dict[str, CaseResult] = {}

    def backend(self, name: str) -> Backend:
        return self.session.backends[name]

    def unavailable(self, name: str) -> str | None:
        return self.session.unavailable.get(name)

    def role(self, case: Case, name: str) -> Role:
        return self.session.roles[case.id].get(name, Role.UNJUDGED)

    def not_judged(self, case: Case, name: str) -> str | None:
        """Why this test has nothing to judge here: its truth is unavailable, or it is a declared reference
        that no candidate is compared against (a test that cannot fail is not a pass)."""
        if name not in self.session.plan[case.id]:
            return f"{name}: nothing here to judge it against (an unavailable backend was its truth)"
        plan = self.session.plan[case.id]
        compared = any(b.against == name and any(b.applies_to(p) for p in plan) for b in case.parity)
        if self.role(case, name) is Role.REFERENCE and not compared:
            return f"{name}: reference only, and no candidate here is compared against it"
        return None

    def case_result(self, case: Case) -> CaseResult:
        if case.id not in self._parity:
            result = self.session.run_case(case, timing=False)
            for sink in self.sinks:
                sink.add(result)
            self._parity[case.id] = result
        return self._parity[case.id]

    def parity_problems(self, case: Case, name: str) -> list[str]:
        """Why `name` fails in this case: it crashed, a bound judging it failed, or nothing judged it."""
        result = self.case_result(case)
        if result.error:
            return [result.error]
        run = result.runs.get(name)
        if run is not None and run.error:
            return [f"{name} raised: {run.error}"]
        if self.role(case, name) is not Role.CANDIDATE:
            return []
        mine = [p for p in result.pairs if p.candidate == name]
        problems = [
            f"{p.candidate} vs {p.against}: {p.verdict.status} ({'; '.join(p.verdict.reasons)})"
            + (f" — {p.diagnosis['summary']}" if p.diagnosis and p.diagnosis.get("summary") else "")
            for p in mine
            if p.verdict.status.failed
        ]
        if not problems and not any(p.verdict.status is Status.PASS for p in mine):
            reasons = "; ".join(r for p in mine for r in p.verdict.reasons) or "no bound applies"
            problems.append(f"{name}: no bound judged it here ({reasons})")
        return problems

    def finish(self, complete: bool) -> None:
        """`complete`: pytest ran every selected test (a -k or an xdist share is complete when it ran)."""
        results = list(self._parity.values())
        for sink in self.sinks:
            sink.finish(results, complete)


def _with_device(options: SessionOptions, device: str) -> SessionOptions:
    return dataclasses.replace(options, device=device)


class CaseBackend:
    """One parametrization of the plugin's test: a case on a backend."""

    def __init__(self, bench: SuiteBench, case: Case, backend: str) -> None:
        self.bench, self.case, self.backend = bench, case, backend

    @property
    def id(self) -> str:
        return f"{self.case.id}-{self.backend}"

    def __repr__(self) -> str:
        return f"CaseBackend({self.id})"

    def extra_info(self) -> dict[str, Any]:
        c = self.case
        return {
            "case_id": c.id,
            "backend": self.backend,
            "role": self.bench.role(c, self.backend).value,
            "workload_hash": workload_hash(c),
            "suite": c.suite,
            "model": c.model.name,
            "q_len": c.q_len,
            "q_lens": list(c.q_lens),
            "heads": c.heads_per_rank,
            "model_heads": c.model.heads,
            "batch_size": c.batch_size,
            "prefix_lens": list(c.prefix_lens),
            "tree": c.tree,
            "device": str(self.bench.device),
        }

    def time(self, benchmark: Any) -> None:
        """Time the backend's launch with pytest-benchmark's fixture: setup re-poisons, the call syncs."""
        backend = self.bench.backend(self.backend)
        inputs = generate_inputs(self.case, self.bench.device)
        on_gpu = inputs.device.type == "cuda"
        launch = prepared(backend, inputs)  # marshaling here, outside the timed call

        def setup() -> None:
            inputs.fresh_output()
            if on_gpu:
                torch.cuda.synchronize()

        def call() -> None:
            launch()
            if on_gpu:
                torch.cuda.synchronize()

        benchmark.pedantic(
            call, setup=setup, rounds=self.bench.rounds, warmup_rounds=self.bench.warmup, iterations=1
        )

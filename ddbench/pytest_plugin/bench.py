"""A suite's cases × backends as benchmark tests: the work behind the pytest plugin, free of pytest hooks.

Each test is one case on one backend. Parity runs once per case (every backend of the case, every bound
judged, as `ddbench run` does) and is cached, so N backends cost one parity run; a test fails when its
backend crashed or any pair with it as the candidate failed. Timing then belongs to pytest-benchmark: inputs
are generated outside the timed call, every round starts from a freshly poisoned output (the setup function,
untimed), and GPU work is synchronised inside the timed call so the host clock covers the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ddbench.backends import Backend, get_backend, load_backend_spec, preferred_device
from ddbench.errors import DdbenchError
from ddbench.inputs import generate_inputs
from ddbench.metrics import ERROR, FAIL
from ddbench.runner import backends_for, run_case
from ddbench.suite.ids import workload_hash
from ddbench.suite.model import Case


class SuiteBench:
    """Backends (instantiated once), cached parity per case, and the timing settings of one session."""

    def __init__(
        self, cases: Sequence[Case], backend_args: Sequence[str] | None, rounds: int, warmup: int
    ) -> None:
        self.device = preferred_device()
        self.rounds, self.warmup = rounds, warmup
        self._backends: dict[str, Backend] = {}  # available ones, instantiated once
        self._specs: dict[str, Backend] = {}
        selected = None
        if backend_args is not None:
            selected = []
            for arg in backend_args:  # `module:attr` specs are loaded now, so their names are known
                if ":" in arg:
                    backend = load_backend_spec(arg)
                    self._specs[backend.name] = backend
                    selected.append(backend.name)
                else:
                    selected.append(arg)
        self.params = [CaseBackend(self, c, name) for c in cases for name in backends_for(c, selected, [])]
        self._unavailable: dict[str, str] = {}
        self._parity: dict[str, dict[str, list[str]]] = {}

    def backend(self, name: str) -> Backend | None:
        """The backend, or None when it cannot run here (`unavailable(name)` says why)."""
        if name in self._unavailable:
            return None
        if name not in self._backends:
            try:
                backend = self._specs.get(name) or get_backend(name)
                status = backend.availability()
            except DdbenchError as err:
                self._unavailable[name] = err.message
                return None
            if not status.ok:
                self._unavailable[name] = f"{name}: unavailable: {status.detail}"
                return None
            self._backends[name] = backend
        return self._backends[name]

    def unavailable(self, name: str) -> str | None:
        return None if self.backend(name) is not None else self._unavailable[name]

    def parity_problems(self, case: Case, name: str) -> list[str]:
        """Why parity fails for `name` in this case (empty: passed, or nothing judged it)."""
        if case.id not in self._parity:
            names = [p.backend for p in self.params if p.case.id == case.id]
            backends = {n: b for n in names if (b := self.backend(n)) is not None}
            result = run_case(case, backends, self.device)
            problems: dict[str, list[str]] = {n: [] for n in backends}
            for n, run in result.runs.items():
                if run.error:
                    problems[n].append(f"{n} raised: {run.error}")
            for p in result.pairs:
                if p.verdict.status in (FAIL, ERROR) and p.candidate in problems:
                    problems[p.candidate].append(
                        f"{p.candidate} vs {p.against}: {p.verdict.status} ({'; '.join(p.verdict.reasons)})"
                    )
            if result.error:
                problems = {n: [result.error] for n in backends}
            self._parity[case.id] = problems  # the outputs are dropped with `result`
        return self._parity[case.id].get(name, [])


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
            "workload_hash": workload_hash(c),
            "suite": c.suite,
            "model": c.model.name,
            "q_len": c.q_len,
            "heads": c.heads_per_rank,
            "model_heads": c.model.heads,
            "batch_size": c.batch_size,
            "prefix_lens": list(c.prefix_lens),
            "tree": c.tree,
            "device": str(self.bench.device),
        }

    def time(self, benchmark: Any) -> None:
        """Time the backend with pytest-benchmark's fixture: setup re-poisons, the call syncs the GPU."""
        backend = self.bench.backend(self.backend)
        assert backend is not None
        inputs = generate_inputs(self.case, self.bench.device)
        on_gpu = inputs.device.type == "cuda"

        def setup() -> None:
            inputs.fresh_output()
            if on_gpu:
                torch.cuda.synchronize()

        def call() -> None:
            backend.run(inputs)
            if on_gpu:
                torch.cuda.synchronize()

        benchmark.pedantic(
            call, setup=setup, rounds=self.bench.rounds, warmup_rounds=self.bench.warmup, iterations=1
        )

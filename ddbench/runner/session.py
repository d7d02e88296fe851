"""The Session: the one run path behind `ddbench run`, `profile`, `baseline update`, the pytest plugin, the
device check.

Everything that can be refused is refused when the Session is made, before any case runs: suites loaded,
cases selected (-k, --shard), backends resolved (built-ins, entry points, `module:attr` plug-ins, the
self-test's mutants) and checked for availability, and every backend that would run judged — a candidate of
some bound, or a declared reference — or refused (exit 2). Then `run` executes each case on the backends its
bounds involve, attaches a diagnosis to failing pairs, times the cases that have a budget, and hands every
result to the sinks as it finishes.

A modeled run (`SessionOptions.model`) selects cases the same way and resolves no backend: `run_modeled`
counts each case's launch under the emulation and models it (ddbench/runner/modeled_run.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ddbench.backends import Backend, get_backend, load_backend_spec, preferred_device
from ddbench.backends.cost import Estimate, check_estimate, estimate_case
from ddbench.backends.registry import BUILTINS, is_family_name, is_plugin_spec
from ddbench.baselines.device import device_key
from ddbench.baselines.lookup import BaselineSet
from ddbench.errors import BackendUnavailable, InputError
from ddbench.explain.attach import diagnose_failures
from ddbench.explain.mutants import MUTANT_FAMILIES
from ddbench.explain.selftest import DEFAULT_AS, SelftestReport, build_mutants, run_selftest
from ddbench.results.case_result import CaseResult
from ddbench.results.document import run_verdict, summary_of
from ddbench.runner.budgets import budget_for
from ddbench.runner.emulated_counters import would_be_sampled
from ddbench.runner.execute import run_case
from ddbench.runner.graph_group import GraphGroup
from ddbench.runner.modeled_run import ModeledOutcome, ModeledRun, ModelRequest, ModelSink
from ddbench.runner.roles import Role, default_backends, lend_bounds, refuse_unjudged, roles_in
from ddbench.runner.selection import load_suites, require_cases, select_cases
from ddbench.runner.sinks import Sink
from ddbench.suite import Case, Suite
from ddbench.suite.case_count import DEFAULT_MAX_CASES
from ddbench.suite.select import normal_shard
from ddbench.timing.settings import TimingSettings


@dataclass(frozen=True)
class SessionOptions:
    """What a command asks of a run; every face builds one of these and nothing else."""

    suites: tuple[str, ...]
    max_cases: int = DEFAULT_MAX_CASES  # per suite file, counted before expanding
    allow_capture_dirs: tuple[str, ...] = ()  # folders besides each suite's own that captures may come from
    filter_expr: str | None = None
    case_ids: tuple[str, ...] | None = None  # exactly these cases, in this order (the device check's picks)
    shard: str | None = None
    backends: tuple[str, ...] | None = None  # names or module:attr; None: each case's own
    plugins: tuple[str, ...] = ()  # `--backend module:attr`: added to every case
    judge_as: str | None = None  # `--as`: lend this candidate's bounds to the backends no bound names
    reference_only: tuple[str, ...] = ()  # backends that are only a truth to compare against
    timing: bool | None = None  # None: the cases with a budget; True: every case; False: none
    timing_mode: str | None = None
    timing_settings: TimingSettings | None = None  # replaces every budget's stopping rule (the device check)
    max_rel_noise: float | None = None  # command-line overrides of the suites' timing settings
    max_seconds: float | None = None
    ratios: tuple[tuple[str, str], ...] = ()  # extra candidate/baseline ratios to measure in every timed case
    timed_backends: tuple[str, ...] = ()  # time only these (the device check: not the references); empty: all
    baseline_file: str | None = None
    device: str | None = None  # e.g. "cuda:1" (a pytest-xdist worker pinned to its GPU)
    diagnose: bool = True
    skip_unavailable: bool = False  # drop unavailable backends (listed in `unavailable`) instead of exit 3
    model: ModelRequest | None = None  # a modeled run instead of a parity run (run_modeled)
    selftest: SelftestRequest | None = None  # the mutation self-test instead of a parity run (run_selftest)


@dataclass(frozen=True)
class SelftestRequest:
    """The mutation self-test: which mutants (all where empty), judged with whose bounds."""

    mutants: tuple[str, ...] = ()  # names or hypotheses
    as_backend: str = DEFAULT_AS
    emu: bool = True  # the emulated kernel's mutants too (where the emulation builds)


@dataclass
class RunOutcome:
    results: list[CaseResult]
    complete: bool
    not_run: dict[str, int] = field(default_factory=dict)  # backend -> cases where nothing would judge it

    @property
    def summary(self) -> dict[str, int]:
        return summary_of(r.to_json() for r in self.results)

    @property
    def verdict(self) -> str:
        return run_verdict(self.summary, self.complete)

    @property
    def exit_code(self) -> int:
        """0 passed; 1 a failure, an error, an incomplete run or nothing judged."""
        return 0 if self.verdict == "passed" else 1


class Session:
    def __init__(self, options: SessionOptions) -> None:
        self.options = options
        self.families = MUTANT_FAMILIES  # the backend families every face serves: the self-test's mutants
        self._graph = GraphGroup()  # the CUDA-graph group being run: its buffers and launches
        self.suites: list[Suite] = load_suites(
            options.suites, max_cases=options.max_cases, allow_capture_dirs=options.allow_capture_dirs
        )
        self.shard = normal_shard(options.shard)
        cases = select_cases(self.suites, options.filter_expr, self.shard)
        if self.shard and not cases and select_cases(self.suites, options.filter_expr):
            require_cases(cases, options.filter_expr, self.shard)
        require_cases(cases, options.filter_expr)
        if options.case_ids is not None:
            cases = _picked(cases, options.case_ids, options.suites)
        self.modeled: ModeledRun | None = None
        self.mutants: tuple[list[Backend], list[Backend], list[str]] | None = None
        if options.model is not None:
            self._prepare_modeled(cases, options.model)
            return
        if options.selftest is not None:
            self._prepare_selftest(cases, options.selftest)
            return
        self.plugins = self._load_plugins()
        asked = self._asked_names()
        if options.judge_as:
            unnamed = [n for n in asked if not _named_by_bounds(cases, n)]
            cases = lend_bounds(cases, unnamed, options.judge_as)
        self.cases: list[Case] = cases
        wanted = {c.id: self._asked_for(c) for c in cases}
        instances = self._instances(wanted)  # an unknown name is the first thing to say
        by_id = {c.id: c for c in cases}
        asked_roles = {i: roles_in(by_id[i], names, options.reference_only) for i, names in wanted.items()}
        refuse_unjudged(cases, asked_roles)
        self.roster = _running(asked_roles)  # case ID -> the judged backends and references it runs
        self.not_run: dict[str, int] = {}
        for by_name in asked_roles.values():
            for name, role in by_name.items():
                if role is Role.UNJUDGED:
                    self.not_run[name] = self.not_run.get(name, 0) + 1
        self.unavailable: dict[str, str] = {}
        self.backends: dict[str, Backend] = self._available(instances)
        # Without an unavailable backend, another may have nothing left to judge it (or to judge).
        self.roles = {
            i: roles_in(by_id[i], [n for n in names if n in self.backends], options.reference_only)
            for i, names in self.roster.items()
        }
        self.plan = _running(self.roles)
        self.device = torch.device(options.device) if options.device else preferred_device()
        self.baselines = BaselineSet(
            device_key(self.device), Path(options.baseline_file) if options.baseline_file else None
        )
        if options.baseline_file:  # a file of another device or suite is refused now, not at its first use
            for suite in self.suites:
                self.baselines.file(suite.name)

    # --- set-up ---------------------------------------------------------------------------------------

    def _prepare_modeled(self, cases: list[Case], request: ModelRequest) -> None:
        """A modeled run runs no backend: it counts on the emulation (on the CPU), where it counts at all."""
        self.modeled = ModeledRun(cases, request)
        self._no_backends(self.modeled.cases, ["cuda-emu"] if request.counts else [])

    def _prepare_selftest(self, cases: list[Case], request: SelftestRequest) -> None:
        """The self-test runs its own mutants and controls in the kernel's place, and the references."""
        try:
            self.mutants = build_mutants(request.mutants, emu=request.emu)
        except KeyError as err:
            raise InputError(err.args[0], path="--mutant") from None
        self._no_backends(cases, [])

    def _no_backends(self, cases: list[Case], counting: list[str]) -> None:
        """A run that resolves no backend of the cases' own: `counting` names what its estimate counts."""
        self.cases = cases
        self.plugins = {}
        self.roster = self.roles = {}
        self.not_run, self.unavailable, self.backends = {}, {}, {}
        self.plan = {c.id: list(counting) for c in self.cases}
        self.device = torch.device("cpu")
        self.baselines = BaselineSet(device_key(self.device), None)

    def _load_plugins(self) -> dict[str, Backend]:
        """`module:attr` arguments (of --backend, or inside --backends) -> the backend each loads. A plug-in
        may not take the name of a built-in or of another plug-in: it would silently stand in for it."""
        for arg in self.options.plugins:  # `--backend` takes module:attr (or a family name), nothing else
            if not is_plugin_spec(arg, self.families) and not is_family_name(arg, self.families):
                load_backend_spec(arg)  # raises the error that says what is expected
        asked = (*self.options.plugins, *(self.options.backends or ()))
        args = [n for n in asked if is_plugin_spec(n, self.families)]
        loaded = {arg: load_backend_spec(arg) for arg in dict.fromkeys(args)}
        seen: dict[str, str] = {}
        for arg, backend in loaded.items():
            if backend.name in BUILTINS or backend.name in seen:
                other = f"the plug-in {seen[backend.name]}" if backend.name in seen else "a built-in backend"
                raise InputError(f"{arg} is named {backend.name!r}, the name of {other}", path="--backend")
            seen[backend.name] = arg
        return loaded

    def _name(self, arg: str) -> str:
        """A `module:attr` argument stands for the backend it loaded, under that backend's own name."""
        return self.plugins[arg].name if arg in self.plugins else arg

    def _extra(self) -> list[str]:
        """What `--backend` adds to every case: loaded plug-ins by their names, registered family names."""
        return [self._name(n) for n in self.options.plugins]

    def _asked_names(self) -> list[str]:
        names = [self._name(n) for n in self.options.backends or ()]
        return list(dict.fromkeys([*names, *self._extra()]))

    def _asked_for(self, case: Case) -> list[str]:
        """`--backends` if given, else the case's own list, else what its bounds name; plus plug-ins."""
        if self.options.backends is not None:
            names = [self._name(n) for n in self.options.backends]
        else:
            names = default_backends(case)
        return list(dict.fromkeys([*names, *self._extra()]))

    def _instances(self, wanted: dict[str, list[str]]) -> dict[str, Backend]:
        names = list(dict.fromkeys(n for names in wanted.values() for n in names))
        by_name = {b.name: b for b in self.plugins.values()}
        return {name: by_name.get(name) or get_backend(name, self.families) for name in names}

    def _available(self, instances: dict[str, Backend]) -> dict[str, Backend]:
        """The planned backends that can run here; any other stops the run (exit 3) before work."""
        planned = set(n for names in self.roster.values() for n in names)
        backends = {n: b for n, b in instances.items() if n in planned}
        for name, backend in backends.items():
            try:
                status = backend.availability()
                ok, detail = bool(status.ok), str(status.detail)
            except Exception as err:  # a plug-in's availability() that raises or returns no Availability
                ok, detail = False, f"availability() failed: {type(err).__name__}: {err}"
            if not ok:
                self.unavailable[name] = f"{name}: unavailable: {detail}"
        if self.unavailable and not self.options.skip_unavailable:
            raise BackendUnavailable("\n".join(self.unavailable.values()))
        return {n: b for n, b in backends.items() if n not in self.unavailable}

    # --- running --------------------------------------------------------------------------------------

    def estimates(self) -> dict[str, Estimate]:
        """case ID -> estimated peak memory and CPU seconds on its planned backends (an estimate)."""
        return {c.id: estimate_case(c, self.plan[c.id], self.device.type) for c in self.cases}

    def check_estimates(self, max_bytes: int | None = None) -> tuple[list[str], list[str]]:
        """(refusals, warnings), one line per case: a case that cannot fit in memory, or that will be slow."""
        device_memory = max_bytes
        if device_memory is None and self.device.type == "cuda":
            device_memory = torch.cuda.get_device_properties(self.device).total_memory
        refusals, warnings = [], []
        sampled = {c.id for c in self.cases if self.modeled is not None and would_be_sampled(c)}
        for case_id, estimate in self.estimates().items():
            found = check_estimate(estimate, max_bytes=device_memory)
            if found is not None and not found.refuse and case_id in sampled:
                continue  # counted on one CTA per work shape: far quicker than the whole launch estimated
            if found is not None:
                (refusals if found.refuse else warnings).append(f"{case_id}: {found.reason}")
        return refusals, warnings

    def describe(self) -> str:
        line = f"{len(self.cases)} cases on {self.device.type}: backends {', '.join(self.backends)}"
        if self.not_run:
            skipped = ", ".join(f"{n} on {k} case(s)" for n, k in self.not_run.items())
            line += f"; not run where no bound judges them: {skipped}"
        return line

    def run_case(self, case: Case, sinks: Sequence[Sink] = (), timing: bool | None = None) -> CaseResult:
        """One case on its planned backends, judged, diagnosed, timed per its budget (or `timing`)."""
        options = self.options
        wanted_timing = options.timing if timing is None else timing
        budget = budget_for(
            case,
            wanted_timing,
            options.timing_mode,
            options.timing_settings,
            options.ratios,
            options.timed_backends,
            max_rel_noise=options.max_rel_noise,
            max_seconds=options.max_seconds,
        )
        baselines = self.baselines.entries(case) if budget else None
        backends = {n: self.backends[n] for n in self.plan[case.id]}

        def step(what: str) -> None:
            for sink in sinks:
                sink.step(case, what)

        diagnose: Callable | None = diagnose_failures if options.diagnose else None
        return run_case(
            case,
            backends,
            self.device,
            budget,
            baselines,
            diagnose=diagnose,
            step=step,
            graph_group=self._graph,
        )

    def run_modeled(self, sinks: Sequence[ModelSink] = ()) -> ModeledOutcome:
        """Every case counted and modeled, in order (a Session made with `SessionOptions.model`)."""
        if self.modeled is None:
            raise ValueError("run_modeled needs a Session made with SessionOptions.model")
        return self.modeled.run(sinks)

    def run_selftest(self, on_case: Callable[[Case, float], None] | None = None) -> SelftestReport:
        """Every mutant and control on every case (a Session made with `SessionOptions.selftest`)."""
        if self.mutants is None or self.options.selftest is None:
            raise ValueError("run_selftest needs a Session made with SessionOptions.selftest")
        mutants, controls, notes = self.mutants
        return run_selftest(self.cases, mutants, controls, self.options.selftest.as_backend, notes, on_case)

    def run(self, sinks: Sequence[Sink] = (), deadline: float | None = None) -> RunOutcome:
        """Every case in order; `deadline` (a perf_counter time) stops before the next case, incomplete."""
        results: list[CaseResult] = []
        complete = True
        for case in self.cases:
            if deadline is not None and time.perf_counter() > deadline:
                complete = False
                break
            result = self.run_case(case, sinks)
            results.append(result)
            for sink in sinks:
                sink.add(result)
        for sink in sinks:
            sink.finish(results, complete)
        return RunOutcome(results, complete, dict(self.not_run))


def _picked(cases: Sequence[Case], ids: Sequence[str], suites: Sequence[str]) -> list[Case]:
    by_id = {c.id: c for c in cases}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise InputError(f"no case {missing[0]!r} in {', '.join(suites)}", path="case_ids")
    if not ids:
        raise InputError("no case picked", path="case_ids")
    return [by_id[i] for i in ids]


def _running(roles: dict[str, dict[str, Role]]) -> dict[str, list[str]]:
    return {
        i: [n for n, role in by_name.items() if role is not Role.UNJUDGED] for i, by_name in roles.items()
    }


def _named_by_bounds(cases: Sequence[Case], name: str) -> bool:
    return any(b.candidate == name or b.against == name for c in cases for b in c.parity)

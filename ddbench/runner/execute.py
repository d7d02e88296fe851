"""Run one case: generate its inputs, call every backend on a poisoned output, judge every bound."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import torch

from ddbench.backends.protocol import Backend, Launch, prepared
from ddbench.baselines.entry import BaselineEntry
from ddbench.errors import InputError
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.layout import READ_ONLY_FIELDS, VerifyInputs
from ddbench.metrics import ERROR, PASS, SKIPPED, Verdict, judge, parity_figures
from ddbench.results.case_result import BackendRun, CaseResult, PairResult
from ddbench.runner.generation_case import run_generation_case
from ddbench.runner.graph_group import GraphGroup
from ddbench.runner.timing import time_case
from ddbench.suite.budget import Budget
from ddbench.suite.model import ANY_BACKEND, Case


def input_fingerprints(inputs: VerifyInputs) -> dict[str, int]:
    """A sum of each read-only tensor's bit patterns: a backend that writes its inputs would corrupt every
    backend after it, so such a write is that backend's error."""
    out = {}
    for name in READ_ONLY_FIELDS:
        t = getattr(inputs, name)
        bits = (
            t.view(torch.uint8)
            if t.element_size() == 1  # bool, or a uint8 custom_mask
            else t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
        )
        out[name] = _chunked_sum(bits)
    return out


_CHUNK_ELEMENTS = 1 << 22  # sum(dtype=int64) widens its input: in chunks, a 32 MB temporary, not 4x the pool


def _chunked_sum(bits: torch.Tensor) -> int:
    if bits.dim() == 0 or bits.numel() <= _CHUNK_ELEMENTS:
        return int(bits.sum(dtype=torch.int64))
    rows = max(1, _CHUNK_ELEMENTS // max(1, bits[0].numel()))
    return sum(int(chunk.sum(dtype=torch.int64)) for chunk in torch.split(bits, rows, dim=0))


def _call(
    backend: Backend, inputs: VerifyInputs, launch_of: Callable[[], Launch] | None = None
) -> BackendRun:
    """One judged call: `launch_of` makes the launch (default: the backend's `prepare` on these inputs)."""
    before = input_fingerprints(inputs)
    run = _timed_call(backend, inputs, launch_of or (lambda: prepared(backend, inputs)))
    changed = [name for name, value in input_fingerprints(inputs).items() if before[name] != value]
    if changed and run.error is None:
        run = BackendRun(backend.name, None, run.seconds, f"modified its inputs: {', '.join(changed)}")
    return run


def _timed_call(backend: Backend, inputs: VerifyInputs, launch_of: Callable[[], Launch]) -> BackendRun:
    inputs.fresh_output()
    if inputs.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    try:
        # The very path the timing takes (prepare, then the launch): what is judged is what is timed.
        output = launch_of()()
        if inputs.device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as err:  # a backend's crash is that case's result, not the end of the run
        return BackendRun(backend.name, None, time.perf_counter() - start, f"{type(err).__name__}: {err}")
    seconds = time.perf_counter() - start
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != tuple(inputs.o_extend.shape):
        shape = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        return BackendRun(
            backend.name,
            None,
            seconds,
            f"returned {shape}, expected a tensor of shape {tuple(inputs.o_extend.shape)}",
        )
    # Keep a copy: the next backend reuses (and re-poisons) the shared output buffer.
    return BackendRun(backend.name, output.detach().clone(), seconds)


def _ran(runs: Mapping[str, BackendRun], name: str) -> bool:
    return name in runs and runs[name].error is None


def _judge_pairs(case: Case, runs: Mapping[str, BackendRun]) -> list[PairResult]:
    pairs = []
    for bound in case.parity:
        candidates = (
            [n for n in runs if bound.applies_to(n)] if bound.candidate == ANY_BACKEND else [bound.candidate]
        )
        for name in candidates:
            cand, against = runs.get(name), runs.get(bound.against)
            if cand is None or against is None:
                missing = name if cand is None else bound.against
                verdict = Verdict(SKIPPED, (f"{missing} not run",))
                pairs.append(PairResult(name, bound.against, bound, verdict))
            elif cand.error or against.error:
                failed = cand if cand.error else against
                pairs.append(
                    PairResult(
                        name, bound.against, bound, Verdict(ERROR, (f"{failed.name}: {failed.error}",))
                    )
                )
            elif bound.no_worse_than and runs.get(bound.no_worse_than) and runs[bound.no_worse_than].error:
                reason = f"{bound.no_worse_than} (named by no_worse_than): {runs[bound.no_worse_than].error}"
                pairs.append(PairResult(name, bound.against, bound, Verdict(ERROR, (reason,))))
            elif cand.output.numel() == 0:
                # 0 heads or 0 draft tokens: every limit holds vacuously, which is no evidence of parity.
                shape = "x".join(str(n) for n in cand.output.shape)
                verdict = Verdict(SKIPPED, (f"compared nothing: the outputs hold 0 elements ({shape})",))
                pairs.append(PairResult(name, bound.against, bound, verdict))
            else:
                figures = parity_figures(cand.output, against.output)
                peer = None
                if bound.no_worse_than and _ran(runs, bound.no_worse_than):
                    peer = parity_figures(runs[bound.no_worse_than].output, against.output)
                verdict = judge(bound, figures, name, peer)
                if bound.no_worse_than and peer is None and verdict.status == PASS:
                    # The absolute limits held; the relative one needs its peer, which this run left out.
                    verdict = Verdict(PASS, (f"no_worse_than {bound.no_worse_than} not judged: not run",))
                pairs.append(PairResult(name, bound.against, bound, verdict, figures))
    return pairs


def run_case(
    case: Case,
    backends: Mapping[str, Backend],
    device: torch.device,
    budget: Budget | None = None,
    baselines: Mapping[str, BaselineEntry] | None = None,
    diagnose: Callable[[CaseResult, VerifyInputs], None] | None = None,
    step: Callable[[str], None] | None = None,
    graph_group: GraphGroup | None = None,
) -> CaseResult:
    """Parity of every bound; then, when a budget is given, latency of the backends that ran cleanly.

    `diagnose` (the Session attaches explain's) annotates failing pairs while the inputs are at hand;
    `step` hears what is about to happen inside the case (progress of a long case); `graph_group` holds a
    CUDA-graph group's buffers and launches across its cases (runner/graph_group.py; without one, each case of
    a group starts it anew)."""
    step = step or (lambda what: None)
    if case.generation is not None:
        return run_generation_case(case, backends, device, step)
    start = time.perf_counter()
    result = CaseResult(case)
    group = graph_group if graph_group is not None else GraphGroup()
    group.enter(case)
    try:
        inputs = generate_inputs(case, device)
        check_inputs(inputs)
    except InputError as err:
        result.error = f"inputs: {err.message}"
        result.seconds = time.perf_counter() - start
        return result
    except Exception as err:  # e.g. out of memory for a huge case: that case's error, not the run's end
        result.error = f"inputs: {type(err).__name__}: {err}"
        result.seconds = time.perf_counter() - start
        return result
    graph = case.graph_replayed
    if graph:
        try:
            inputs = group.bind(case, inputs)
        except ValueError as err:
            result.error = f"inputs: the group's buffers: {err}"
            result.seconds = time.perf_counter() - start
            return result
    for name, backend in backends.items():
        step(f"running {name}")
        result.runs[name] = _call(backend, inputs, (lambda b=backend: group.launch(b)) if graph else None)
    result.pairs = _judge_pairs(case, result.runs)
    if diagnose is not None:
        step("explaining failures")
        diagnose(result, inputs)
    clean = {name: b for name, b in backends.items() if result.runs[name].error is None}
    if budget is not None and clean:
        step(f"timing {', '.join(clean)}")
        try:
            result.timing = time_case(case, budget, clean, inputs, baselines or {})
        except Exception as err:  # a backend that fails while being timed: this case's error
            result.error = f"timing: {type(err).__name__}: {err}"
    result.seconds = time.perf_counter() - start
    return result

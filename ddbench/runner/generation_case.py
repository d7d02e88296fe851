"""Run one end-to-end generation case: decode with every backend, judge each bound's pair by its gates.

Runs: plain greedy decoding (no speculation) with each bound's `against` attention, the truth the tokens
are compared with; then speculative decoding with every planned backend, each verify step also run with
the `against` attention of the backend's bound (teacher-forced). A backend's fault ends its own run and
makes its pairs errors; the other runs go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import torch

from ddbench.backends.protocol import Backend
from ddbench.errors import DdbenchError
from ddbench.generation.checkpoint import load_checkpoint_model
from ddbench.generation.decode import DecodeRun, Workload, decode
from ddbench.generation.eagle_tree import eagle_tree_builder
from ddbench.generation.greedy_accept import greedy_acceptor
from ddbench.generation.mla_model import AbsorbedMlaModel
from ddbench.generation.target import ModelShape, TargetModel
from ddbench.metrics import ERROR, FAIL, PASS, SKIPPED, Verdict
from ddbench.metrics.generation_gates import (
    GateCheck,
    accept_gate,
    agreement,
    teacher_forced_gate,
    tokens_gate,
)
from ddbench.results.case_result import BackendRun, CaseResult, PairResult
from ddbench.results.generation_record import GenerationRecord
from ddbench.suite.model import ANY_BACKEND, Case, ParityBound


def _teacher_of(case: Case, name: str, running: Mapping[str, Backend]) -> str | None:
    """The `against` of the first bound that judges `name` (and runs): whose attention teaches it."""
    for bound in case.parity:
        if bound.applies_to(name) and bound.against in running:
            return bound.against
    return None


def run_generation_case(
    case: Case, backends: Mapping[str, Backend], device: torch.device, step: Callable[[str], None]
) -> CaseResult:
    spec = case.generation
    assert spec is not None
    start = time.perf_counter()
    result = CaseResult(case)
    try:
        model = _model(case, device)
    except DdbenchError:  # a checkpoint that cannot serve: the user's to fix (exit 2), as at suite load
        raise
    except Exception as err:  # e.g. out of memory for the weights: this case's error, not the run's end
        result.error = f"model: {type(err).__name__}: {err}"
        result.seconds = time.perf_counter() - start
        return result
    tree = case.tree_of(0)
    workload = Workload(
        case.prefix_lens, spec.new_tokens, tree, case.q_len, case.page_size, spec.drafter_noise, case.seed
    )
    accept, acceptance = greedy_acceptor()
    build, building = eagle_tree_builder()
    record = GenerationRecord(
        acceptance, _checkpoint_json(case, model), building if tree["kind"] == "eagle" else None
    )
    for truth in dict.fromkeys(b.against for b in case.parity if b.against in backends):
        step(f"plain greedy decoding with {truth}")
        record.greedy[truth] = decode(
            model, workload, backends[truth], accept, build, device, speculate=False
        )
    for name, backend in backends.items():
        teacher = _teacher_of(case, name, backends)
        step(f"speculative decoding with {name}" + (f", taught by {teacher}" if teacher else ""))
        run = decode(
            model,
            workload,
            backend,
            accept,
            build,
            device,
            teacher=backends[teacher] if teacher and teacher != name else None,
            tie_margin=spec.tie_margin,
        )
        record.runs[name] = run
        result.runs[name] = BackendRun(name, None, run.seconds, run.error)
    result.generation = record
    result.pairs = _judge(case, record)
    result.seconds = time.perf_counter() - start
    return result


def _model(case: Case, device: torch.device) -> TargetModel:
    """The seeded model, or the checkpoint's first `layers` layers, one verify call per TP rank's heads."""
    spec = case.generation
    assert spec is not None
    if spec.checkpoint is not None:
        return load_checkpoint_model(
            spec.checkpoint.folder, spec.layers, case.heads_per_rank, device, case.seed
        )
    shape = ModelShape(
        spec.layers, spec.hidden, spec.vocab, case.heads_per_rank, case.model.sm_scale, case.seed
    )
    return AbsorbedMlaModel(shape, device)


def _checkpoint_json(case: Case, model: TargetModel) -> dict[str, object] | None:
    """What the results say of a checkpoint's model: where from, its size, its head groups and sm_scale."""
    spec = case.generation
    if spec is None or spec.checkpoint is None:
        return None
    info = spec.checkpoint
    return {
        "path": info.name,
        "model_type": info.model_type,
        "layers": model.shape.layers,
        "layers_in_checkpoint": info.layers,
        "heads": info.heads,
        "heads_per_call": model.shape.heads,
        "head_groups": info.heads // model.shape.heads,
        "sm_scale": model.shape.sm_scale,
        "bos": model.bos,
    }


def _judge(case: Case, record: GenerationRecord) -> list[PairResult]:
    pairs = []
    for bound in case.parity:
        names = (
            [n for n in record.runs if bound.applies_to(n)]
            if bound.candidate == ANY_BACKEND
            else [bound.candidate]
        )
        for name in names:
            pairs.append(_pair(case, bound, name, record))
    return pairs


def _pair(case: Case, bound: ParityBound, name: str, record: GenerationRecord) -> PairResult:
    cand, truth = record.runs.get(name), record.runs.get(bound.against)
    greedy = record.greedy.get(bound.against)
    if cand is None or truth is None or greedy is None:
        missing = name if cand is None else bound.against
        return PairResult(name, bound.against, bound, Verdict(SKIPPED, (f"{missing} not run",)))
    failed = next((r for r in (cand, truth, greedy) if r.error), None)
    if failed is not None:
        which = "plain greedy with " + failed.backend if failed is greedy else failed.backend
        return PairResult(name, bound.against, bound, Verdict(ERROR, (f"{which}: {failed.error}",)))
    gates = _gates(case, bound, cand, truth, greedy, record)
    status = FAIL if any(g.status == FAIL for g in gates) else PASS
    failing = tuple(g.detail for g in gates if g.status == FAIL)
    reasons = failing or ("; ".join(g.short for g in gates),)
    return PairResult(name, bound.against, bound, Verdict(status, reasons), gates=tuple(gates))


def _gates(
    case: Case,
    bound: ParityBound,
    cand: DecodeRun,
    truth: DecodeRun,
    greedy: DecodeRun,
    record: GenerationRecord,
) -> list[GateCheck]:
    spec = case.generation
    assert spec is not None
    tau = spec.tie_margin
    gates = []
    if cand is not truth:
        peer_run = record.runs.get(bound.no_worse_than or "")
        peer = None
        if peer_run is not None and peer_run.teacher and bound.no_worse_than != cand.backend:
            peer = (peer_run.backend, max(e.max_abs for e in peer_run.teacher))
        gates.append(
            teacher_forced_gate(
                bound.against,
                dict(bound.limits),
                max((e.max_abs for e in cand.teacher), default=0.0),
                sum(e.mean_abs for e in cand.teacher) / max(1, len(cand.teacher)),
                sum(e.confident_flips for e in cand.teacher),
                len(cand.teacher),
                peer,
            )
        )
    found = agreement(cand.tokens, cand.margins, greedy.tokens, greedy.margins, tau)
    gates.append(tokens_gate("tokens_vs_greedy", f"plain greedy decoding with {bound.against}", found, tau))
    if cand is not truth:
        found = agreement(cand.tokens, cand.margins, truth.tokens, truth.margins, tau)
        gates.append(
            tokens_gate(f"tokens_vs_{bound.against}", f"{bound.against}'s speculative run", found, tau)
        )
    gates.append(accept_gate(cand.mean_accept_length, spec.min_accept_length, len(cand.accept_lengths)))
    return gates

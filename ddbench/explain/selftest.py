"""The mutation self-test: every classic mistake, as a backend, must fail parity and be named by explain.

For each case and mutant: the mutant takes the place of the kernel (`as_backend`, default `cuda-emu`) and
is judged with that backend's bounds against the torch references (bounds against other kernels, and the
relative `no_worse_than` limit, need those kernels and are left out); `caught` = a bound fails (or the
mutant crashes). `diagnosed` = on a case where it was caught, `explain` names the mutant's own mistake,
judged as a run's failing pair is (the hypothesis must reproduce the output within the bound it failed).
Controls (correct bf16 outputs of the fp32 and fp64 references, of P rounded to bf16 and to fp16, and the
unmutated kernel) must pass and match the reference: if the bounds fail them, the self-test says nothing.
Each outcome records the output's gain figure against the fp64 truth (a control's should be near 0).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.backends.protocol import Availability, Backend, capabilities
from ddbench.backends.reference import ReferenceBackend
from ddbench.explain.attention import correct_plan, evaluate
from ddbench.explain.diagnose import Explainer
from ddbench.explain.mutants import get_mutant, mutant_names
from ddbench.explain.rank import MATCHES_REFERENCE
from ddbench.explain.threads import single_thread
from ddbench.inputs import check_inputs, generate_inputs
from ddbench.inputs.layout import VerifyInputs
from ddbench.metrics import judge, parity_figures
from ddbench.suite.model import Case, ParityBound
from ddbench.suite.resolve import DEFAULT_PARITY

REFERENCES = ("reference", "reference-fp64")
DEFAULT_AS = "cuda-emu"
CONTROL_PREFIX = "control:"


class RoundedReference:
    """A correct bf16 kernel: the float32 (or float64) reference rounded into the output buffer."""

    def __init__(self, accumulate: torch.dtype = torch.float32) -> None:
        self.accumulate = accumulate
        fp64 = accumulate == torch.float64
        self.name = CONTROL_PREFIX + ("reference-fp64-bf16" if fp64 else "reference-bf16")

    def availability(self) -> Availability:
        return Availability.yes(f"control: the {self.accumulate} reference rounded to bf16")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        inputs.o_extend.copy_(ReferenceBackend(self.accumulate).run(inputs))
        return inputs.o_extend


class RoundedP:
    """A correct flash kernel's rounding: P = exp(s - max) rounded to bf16 or fp16 before P.V, the row sum
    taken of the rounded values, the output rounded to bf16 (computed in float64 otherwise)."""

    def __init__(self, p_dtype: torch.dtype) -> None:
        self.p_dtype = p_dtype
        self.name = CONTROL_PREFIX + f"p-{str(p_dtype).removeprefix('torch.')}"

    def availability(self) -> Availability:
        return Availability.yes(f"control: P rounded to {self.p_dtype}")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        predicted = evaluate(correct_plan(inputs), torch.float64, round_p=self.p_dtype)
        inputs.o_extend.copy_(predicted.output.masked_fill(predicted.free[..., None], 0.0))
        return inputs.o_extend


class ControlKernel(CudaEmuBackend):
    name = CONTROL_PREFIX + "cuda-emu"


@dataclass(frozen=True)
class Outcome:
    case: str
    visible: bool  # the mistake changes the output on this case
    caught: bool
    reasons: tuple[str, ...]
    diagnosed: bool
    verdict: str  # explain's verdict, or "" when the mutant crashed
    top: str | None  # the best-ranked hypothesis
    summary: str
    gain: float | None = None  # least-squares gain against reference-fp64, in bf16 steps (2^-8)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"reasons": list(self.reasons)}


@dataclass
class MutantReport:
    name: str
    hypothesis: str | None  # None for the controls
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.name.split(":", 1)[0]

    @property
    def caught(self) -> int:
        return sum(o.caught for o in self.outcomes)

    @property
    def diagnosed(self) -> int:
        return sum(o.diagnosed for o in self.outcomes)

    @property
    def max_abs_gain(self) -> float | None:
        gains = [abs(o.gain) for o in self.outcomes if o.gain is not None]
        return max(gains) if gains else None

    @property
    def holes(self) -> list[str]:
        """Cases where the mistake changed the output and no bound failed: a case the suite lacks."""
        return [o.case for o in self.outcomes if o.visible and not o.caught]

    @property
    def ok(self) -> bool:
        if self.hypothesis is None:  # a control: never caught, always within noise of the reference
            return self.caught == 0 and all(o.verdict == MATCHES_REFERENCE for o in self.outcomes)
        return self.caught > 0 and self.diagnosed > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hypothesis": self.hypothesis,
            "kind": self.kind,
            "cases": len(self.outcomes),
            "caught": self.caught,
            "diagnosed": self.diagnosed,
            "ok": self.ok,
            "holes": self.holes,
            "max_abs_gain": None if self.max_abs_gain is None else round(self.max_abs_gain, 4),
            "outcomes": [o.to_json() for o in self.outcomes],
        }


@dataclass
class SelftestReport:
    as_backend: str
    cases: list[str]
    mutants: list[MutantReport]
    controls: list[MutantReport]
    notes: list[str]
    seconds: float = 0.0

    @property
    def kill_rate(self) -> float:
        return sum(m.caught > 0 for m in self.mutants) / max(len(self.mutants), 1)

    @property
    def diagnosis_rate(self) -> float:
        return sum(m.diagnosed > 0 for m in self.mutants) / max(len(self.mutants), 1)

    @property
    def case_diagnosis_rate(self) -> float:
        caught = sum(m.caught for m in self.mutants)
        return sum(m.diagnosed for m in self.mutants) / caught if caught else 0.0

    @property
    def ok(self) -> bool:
        return bool(self.mutants) and all(m.ok for m in self.mutants + self.controls)

    def to_json(self) -> dict[str, Any]:
        return {
            "as_backend": self.as_backend,
            "cases": self.cases,
            "ok": self.ok,
            "kill_rate": self.kill_rate,
            "diagnosis_rate": self.diagnosis_rate,
            "case_diagnosis_rate": round(self.case_diagnosis_rate, 4),
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
            "mutants": [m.to_json() for m in self.mutants],
            "controls": [m.to_json() for m in self.controls],
        }


def kernel_bounds(case: Case, as_backend: str) -> list[ParityBound]:
    """The case's bounds on `as_backend` that a reference can judge, without the relative limit."""
    bounds = [
        dataclasses.replace(b, no_worse_than=None)
        for b in case.parity
        if b.applies_to(as_backend) and b.against in REFERENCES
    ]
    return bounds or list(DEFAULT_PARITY)  # triton's default bound: against `reference`


def build_mutants(
    names: Sequence[str] | None = None, emu: bool = True
) -> tuple[list[Backend], list[Backend], list[str]]:
    """(mutants, controls, notes): the emulated ones only where the emulation builds here."""
    notes: list[str] = []
    if emu:
        status = ControlKernel().availability()
        if not status.ok:
            notes.append(f"cuda-emu: unavailable, its mutants are skipped: {status.detail}")
            emu = False
    chosen = mutant_names(emu)
    if names:
        wanted = set(names)
        chosen = [n for n in chosen if n in wanted or n.split(":", 1)[1] in wanted]
        unknown = wanted - {n for n in mutant_names(True)} - {n.split(":", 1)[1] for n in mutant_names(True)}
        if unknown:
            raise KeyError(f"unknown mutant {sorted(unknown)[0]!r}; known: {', '.join(mutant_names(True))}")
    controls: list[Backend] = [
        RoundedReference(),
        RoundedReference(torch.float64),
        RoundedP(torch.bfloat16),
        RoundedP(torch.float16),
    ] + ([ControlKernel()] if emu else [])
    return [get_mutant(n) for n in chosen], controls, notes


def _outcome(
    backend: Backend,
    case: Case,
    bounds: Sequence[ParityBound],
    x: VerifyInputs,
    truths: dict[str, torch.Tensor],
    explainer: Explainer,
) -> Outcome:
    hypothesis = capabilities(backend).hypothesis
    variant = getattr(backend, "variant", None)  # a mutant computes one variant of its mistake
    visible = explainer.changes_output(hypothesis, variant) if hypothesis else False
    x.fresh_output()
    try:
        out = backend.run(x).detach().clone()
    except Exception as err:  # a crash fails the case in a run: caught, but nothing to diagnose
        reason = f"{type(err).__name__}: {err}"
        return Outcome(case.id, visible, True, (reason,), False, "", None, reason)
    reasons: list[str] = []
    failed: dict[str, float] | None = None  # the first failed bound's limits: explain judges within them
    for bound in bounds:
        v = judge(bound, parity_figures(out, truths[bound.against]), backend.name)
        reasons += [f"vs {bound.against}: {r}" for r in v.reasons]
        if v.reasons and failed is None:
            failed = dict(bound.limits)
    diagnosis = explainer.diagnose(out, failed_bound=failed)
    caught = bool(reasons)
    gain = parity_figures(out, truths["reference-fp64"]).gain
    return Outcome(
        case.id,
        visible or caught,  # within bf16 noise of the correct output, yet outside a sharp bound: it shows
        caught,
        tuple(reasons),
        caught and hypothesis is not None and diagnosis.explains(hypothesis),
        diagnosis.verdict,
        diagnosis.ranking[0].hypothesis if diagnosis.ranking else None,
        diagnosis.summary(),
        gain,
    )


def run_selftest(
    cases: Sequence[Case],
    mutants: Sequence[Backend],
    controls: Sequence[Backend],
    as_backend: str = DEFAULT_AS,
    notes: Sequence[str] = (),
    on_case: Callable[[Case, float], None] | None = None,
) -> SelftestReport:
    start = time.perf_counter()
    reports = {b.name: MutantReport(b.name, capabilities(b).hypothesis) for b in [*mutants, *controls]}
    with single_thread():
        for case in cases:
            case_start = time.perf_counter()
            x = generate_inputs(case)
            check_inputs(x)
            truths = {
                "reference": ReferenceBackend().run(x),
                "reference-fp64": ReferenceBackend(torch.float64).run(x),
            }
            explainer = Explainer(x)
            bounds = kernel_bounds(case, as_backend)
            for backend in [*mutants, *controls]:
                outcome = _outcome(backend, case, bounds, x, truths, explainer)
                reports[backend.name].outcomes.append(outcome)
            if on_case:
                on_case(case, time.perf_counter() - case_start)
    return SelftestReport(
        as_backend,
        [c.id for c in cases],
        [reports[b.name] for b in mutants],
        [reports[b.name] for b in controls],
        list(notes),
        time.perf_counter() - start,
    )

"""Diagnose a candidate output: rank every classic mistake by how well it reproduces it, map the error.

`Explainer(inputs)` evaluates the correct output and every candidate-independent hypothesis once, so many
candidates of one case (a run's failing pairs, the self-test's mutants) cost one comparison each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ddbench.explain.attention import Prediction, correct_plan, evaluate
from ddbench.explain.error_map import ErrorMap, error_map
from ddbench.explain.hypotheses import HYPOTHESES, Context, Hypothesis, NotApplicable, Variant
from ddbench.explain.rank import (
    EXPLAINED,
    MATCHES_REFERENCE,
    RULE,
    Match,
    Prepared,
    Ranked,
    match_prepared,
    measures,
    rank,
    verdict,
)
from ddbench.inputs.layout import VerifyInputs


@dataclass(frozen=True)
class Diagnosis:
    verdict: str  # EXPLAINED, MATCHES_REFERENCE or UNEXPLAINED
    ranking: tuple[Ranked, ...]  # one entry per hypothesis (its best variant), best first
    reference: Match  # the candidate against the correct output
    aliases: tuple[str, ...]  # hypotheses giving the same output as the best one on this workload
    error_map: ErrorMap
    not_applicable: tuple[tuple[str, str], ...] = ()  # (hypothesis, why) that cannot apply to these inputs
    failed: bool = False  # the candidate failed a bound (a run's failing pair)

    @property
    def best(self) -> Ranked | None:
        return self.ranking[0] if self.verdict == EXPLAINED else None

    def explains(self, hypothesis: str) -> bool:
        """Named as the cause: the best hypothesis, or one this workload cannot tell apart from it."""
        return self.best is not None and hypothesis in (self.best.hypothesis, *self.aliases)

    def summary(self) -> str:
        ref = self.reference
        if self.verdict == MATCHES_REFERENCE:
            return (
                f"within bf16 noise of the correct output (rel L2 {ref.rel_l2:.1e}, mean row "
                f"{ref.mean_row_ulp:.2f} ULP): a precision matter, not a classic mistake"
            )
        top = self.ranking[0] if self.ranking else None
        if self.verdict == EXPLAINED and top is not None:
            also = f"; this workload cannot tell it from: {', '.join(self.aliases)}" if self.aliases else ""
            return (
                f"{top.title} [{top.hypothesis}] reproduces the output (rel L2 {top.match.rel_l2:.1e}, "
                f"vs {_rel(ref)} for the correct output){also}"
            )
        closest = (
            f"closest: {top.hypothesis} at {_rel(top.match)}; " if top is not None and top.distinct else ""
        )
        where = self.error_map.findings[0] if self.error_map.findings else "no localisation"
        close = (
            " — close to the correct output, yet it failed its bound: a real error, however small"
            if self.failed and ref.within_noise()
            else ""
        )
        return f"no hypothesis explains it ({closest}correct output at {_rel(ref)}){close}; {where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "hypothesis": self.best.hypothesis if self.best else None,
            "variant": self.best.variant if self.best else None,
            "aliases": list(self.aliases),
            "summary": self.summary(),
            "rule": RULE,
            "reference": self.reference.to_json(),
            "ranking": [r.to_json() for r in self.ranking],
            "not_applicable": [{"hypothesis": h, "why": why} for h, why in self.not_applicable],
            "error_map": self.error_map.to_json(),
        }


def _rel(m: Match) -> str:
    text = f"rel L2 {m.rel_l2:.2g}"
    return text + (f" + {m.nan_mismatch:.2%} of elements NaN-mismatched" if m.nan_mismatch else "")


class Explainer:
    """The hypotheses of one case's inputs, evaluated once; `diagnose` compares a candidate to them."""

    def __init__(self, inputs: VerifyInputs, hypotheses: Sequence[Hypothesis] = HYPOTHESES) -> None:
        self.inputs = inputs
        self.hypotheses = tuple(hypotheses)
        plan = correct_plan(inputs)
        self.context = Context(inputs, plan, evaluate(plan))
        self._correct = Prepared.of_prediction(self.context.correct)
        self._not_applicable: dict[tuple[str, str], str] = {}
        self._fixed: dict[tuple[str, str], _Evaluated] = {}
        for h in self.hypotheses:
            for v in h.variants:
                if not v.uses_candidate:
                    evaluated = self._predicted(h, v, self.context)
                    if evaluated is not None:
                        self._fixed[h.name, v.name] = evaluated
        self._visible: dict[tuple[str, str | None], bool] = {}

    @property
    def correct(self) -> Prediction:
        return self.context.correct

    def changes_output(self, hypothesis: str, variant: str | None = None) -> bool:
        """Whether the mistake shows at all on this workload (a causal mask on a chain does not); with
        `variant`, that variant only (what one mutant computes: a 2048-key window, not a 512-key one).

        A variant fitted to the candidate is judged by what it predicts without one (its reference mutant).
        """
        key = (hypothesis, variant)
        if key not in self._visible:
            h = next(h for h in self.hypotheses if h.name == hypothesis)
            variants = [v for v in h.variants if variant in (None, v.name)]
            if not variants:
                raise KeyError(f"{hypothesis} has no variant {variant!r}")
            predictions = (
                self._fixed.get((h.name, v.name)) or self._predicted(h, v, self.context) for v in variants
            )
            self._visible[key] = any(p is not None and p.distinct for p in predictions)
        return self._visible[key]

    def _predicted(self, hypothesis: Hypothesis, variant: Variant, ctx: Context) -> _Evaluated | None:
        """The variant's prediction, or None (and the reason kept) when it cannot apply to these inputs."""
        try:
            return self._evaluated(variant.predict(ctx))
        except NotApplicable as why:
            self._not_applicable[hypothesis.name, variant.name] = str(why)
            return None

    def _evaluated(self, prediction: Prediction) -> _Evaluated:
        prepared = Prepared.of_prediction(prediction)
        against = match_prepared(prepared, self._correct)
        return _Evaluated(prediction, prepared, not against.within_noise(), against)

    def _prediction(
        self, hypothesis: Hypothesis, variant: Variant, candidate: torch.Tensor
    ) -> _Evaluated | None:
        if not variant.uses_candidate:
            return self._fixed.get((hypothesis.name, variant.name))
        return self._predicted(
            hypothesis, variant, Context(self.inputs, self.context.plan, self.correct, candidate)
        )

    def diagnose(self, candidate: torch.Tensor, failed_bound: Mapping[str, float] | None = None) -> Diagnosis:
        """`failed_bound`: the limits the candidate failed, when it comes from a failing pair (see RULE)."""
        if tuple(candidate.shape) != tuple(self.correct.output.shape):
            raise ValueError(
                f"candidate shape {tuple(candidate.shape)} is not the output's "
                f"{tuple(self.correct.output.shape)}"
            )
        c = Prepared.of(candidate)
        entries, evaluated, not_applicable = [], {}, []
        for h in self.hypotheses:
            best: tuple[Ranked, _Evaluated] | None = None
            for v in h.variants:
                e = self._prediction(h, v, candidate)
                if e is None:
                    continue
                entry = Ranked(
                    h.name,
                    h.title,
                    h.why,
                    v.name,
                    v.how,
                    match_prepared(c, e.prepared),
                    e.distinct_at(failed_bound),
                )
                if best is None or rank([entry, best[0]])[0] is entry:
                    best = (entry, e)
            if best is None:  # no variant of it can apply here: said, never ranked
                why = next(w for (name, _), w in self._not_applicable.items() if name == h.name)
                not_applicable.append((h.name, why))
                continue
            entries.append(best[0])
            evaluated[h.name] = best[1]
        ranking = rank(entries)
        reference = match_prepared(c, self._correct)
        outcome = verdict(ranking, reference, failed_bound)
        aliases: tuple[str, ...] = ()
        if outcome == EXPLAINED:
            top = evaluated[ranking[0].hypothesis].prepared
            aliases = tuple(
                e.hypothesis
                for e in ranking[1:]
                if e.distinct and match_prepared(evaluated[e.hypothesis].prepared, top).within(failed_bound)
            )
        return Diagnosis(
            outcome,
            tuple(ranking),
            reference,
            aliases,
            error_map(candidate, self.correct, self.inputs),
            tuple(not_applicable),
            failed_bound is not None,
        )


@dataclass(frozen=True)
class _Evaluated:
    prediction: Prediction
    prepared: Prepared
    distinct: bool  # differs from the correct output on this workload, beyond bf16 noise
    against_correct: Match  # the prediction against the correct output

    def distinct_at(self, bound: Mapping[str, float] | None) -> bool:
        """Beyond noise, or (for a failed pair) outside the bound that pair failed."""
        if self.distinct or bound is None:
            return self.distinct
        return measures(bound) and not self.against_correct.within_limits(bound)


def explain(inputs: VerifyInputs, candidate: torch.Tensor) -> Diagnosis:
    """One-shot diagnosis of `candidate` (a backend's output for `inputs`)."""
    return Explainer(inputs).diagnose(candidate)

"""Two model baselines side by side: per case, how each exact counter and modeled figure changed, and which
changes are regressions (pure).

The judgement is `entry_regressions`, the same one `ddbench profile --baseline` applies, so reviewing a
baseline update with `ddbench baseline diff OLD NEW` fails exactly where the CI gate would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddbench.errors import InputError
from ddbench.model.model_baseline import EXACT_FIELDS, Tolerances, check_baseline, entry_regressions

FIGURES = (*EXACT_FIELDS, "modeled_us", "modeled_cuda_over_triton")


@dataclass(frozen=True)
class FigureChange:
    case: str
    figure: str
    before: float | None  # None: the case is new
    after: float | None  # None: the case was removed

    @property
    def relative(self) -> float | None:
        if self.before is None or self.after is None or self.before == 0:
            return None
        return self.after / self.before - 1


@dataclass
class ModelDiff:
    changes: list[FigureChange] = field(default_factory=list)  # only the figures that differ
    regressions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0  # cases in both


def diff_model_baselines(
    before: Any,
    after: Any,
    tolerances: Tolerances,
    sources: tuple[str, str] = ("before", "after"),
    allow_mismatch: bool = False,
) -> ModelDiff:
    old_doc, new_doc = check_baseline(before, sources[0]), check_baseline(after, sources[1])
    if old_doc.get("gpu") != new_doc.get("gpu") and not allow_mismatch:
        raise InputError(
            f"a baseline for {new_doc.get('gpu')!r}, not {old_doc.get('gpu')!r} like {sources[0]} "
            "(counts differ between GPUs: the splits are planned for their SMs)",
            file=sources[1],
            path="gpu",
        )
    out = ModelDiff()
    same_calibration = old_doc.get("calibration") == new_doc.get("calibration")
    if not same_calibration:
        out.notes.append(
            f"modeled times not compared: calibration {old_doc.get('calibration')!r} -> "
            f"{new_doc.get('calibration')!r}"
        )
    old_cases: Mapping[str, Any] = old_doc["cases"]
    new_cases: Mapping[str, Any] = new_doc["cases"]
    for case_id in sorted(set(old_cases) | set(new_cases)):
        old, new = old_cases.get(case_id), new_cases.get(case_id)
        if old is None or new is None:
            out.notes.append(f"{case_id}: {'new' if old is None else 'removed'}")
            out.changes += [
                FigureChange(case_id, f, None if old is None else old[f], None if new is None else new[f])
                for f in FIGURES
            ]
            continue
        out.compared += 1
        out.changes += [FigureChange(case_id, f, old[f], new[f]) for f in FIGURES if old[f] != new[f]]
        out.regressions += entry_regressions(case_id, old, new, tolerances, same_calibration)
    return out

"""A case's limits on *modeled* figures, as a suite budget states them (judged by `ddbench profile
--baseline` against a model baseline of the named GPU).

Counters are exact, so the defaults allow no extra DRAM byte and no new bank conflict; the modeled time is
deterministic too, and its default slack only covers float summation order. The GPU keys are the model's
hardware tables (ddbench.gpus); the schema lists them, and a test keeps the two lists equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_MODELED_REGRESSION = 0.01


@dataclass(frozen=True)
class ModelBudget:
    gpu: str  # the model's GPU key (rtx-pro-6000, rtx-5090, h200): a budget holds only on that GPU
    max_modeled_regression: float = DEFAULT_MAX_MODELED_REGRESSION  # modeled-µs growth allowed, relative
    max_extra_dram_bytes: int = 0  # unique DRAM bytes allowed above the baseline's
    max_new_bank_conflicts: int = 0  # shared-memory bank conflicts allowed above the baseline's
    max_modeled_cuda_over_triton: float | None = None  # a ceiling on the modeled cuda/triton ratio

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "max_modeled_regression": self.max_modeled_regression,
            "max_extra_dram_bytes": self.max_extra_dram_bytes,
            "max_new_bank_conflicts": self.max_new_bank_conflicts,
            "max_modeled_cuda_over_triton": self.max_modeled_cuda_over_triton,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelBudget:
        ceiling = data.get("max_modeled_cuda_over_triton")
        return cls(
            gpu=data["gpu"],
            max_modeled_regression=float(data.get("max_modeled_regression", DEFAULT_MAX_MODELED_REGRESSION)),
            max_extra_dram_bytes=int(data.get("max_extra_dram_bytes", 0)),
            max_new_bank_conflicts=int(data.get("max_new_bank_conflicts", 0)),
            max_modeled_cuda_over_triton=None if ceiling is None else float(ceiling),
        )


def model_budgets_from_json(spec: Any) -> tuple[ModelBudget, ...]:
    """The `model` field: one object, or a list of them (one per GPU)."""
    if spec is None:
        return ()
    items = spec if isinstance(spec, list) else [spec]
    return tuple(ModelBudget.from_json(item) for item in items)

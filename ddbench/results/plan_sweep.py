"""One case's plan beside its neighbours in the model: the record `profile --plan-sweep` reports (every
figure modeled)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PlanSweep:
    case: str
    plan: str  # the plan's launch, in words
    modeled_us: dict[str, float] = field(default_factory=dict)  # variant -> modeled µs
    refused: dict[str, str] = field(default_factory=dict)  # variant -> why the plan refused it

    @property
    def fastest(self) -> str:
        """The variant of least modeled time ("plan" on a tie; "" where none was modeled)."""
        return min(self.modeled_us, key=lambda name: self.modeled_us[name], default="")

    @property
    def gain(self) -> float:
        """The share of the plan's modeled time its fastest neighbour saves (0 where the plan is fastest)."""
        plan = self.modeled_us.get("plan", 0.0)
        return 1.0 - self.modeled_us[self.fastest] / plan if plan > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "plan": self.plan,
            "modeled_us": self.modeled_us,
            "refused": self.refused,
            "fastest": self.fastest,
            "modeled_gain": self.gain,
        }

"""One case's profile: its launch model, floor and Triton model side by side (pure).

Every time here is modeled, and every key of its JSON says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ddbench.counters import LaunchCounters
from ddbench.gpus import GpuSpec
from ddbench.kernel.sass_map import KernelSass
from ddbench.model.calibration import Calibration
from ddbench.model.floor import CaseShape, Floor, floor
from ddbench.model.kernel_time import KernelModel, LaunchModel, model_launch
from ddbench.model.triton_model import model_triton


@dataclass(frozen=True)
class CaseProfile:
    case_id: str
    shape: CaseShape
    launch: LaunchModel
    floor: Floor
    triton: KernelModel
    triton_overhead_us: float
    modeling_seconds: float | None = None  # host time the counters and the model took (not a GPU time)

    @property
    def triton_us(self) -> float:
        return self.triton.modeled_us + self.triton_overhead_us

    @property
    def cuda_over_triton(self) -> float:
        return self.launch.modeled_us / self.triton_us

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case_id,
            "prefix_lens": list(self.shape.prefix_lens),
            "q_len": self.shape.q_len,
            "q_lens": list(self.shape.q_lens),
            "heads_per_rank": self.shape.heads,
            "cuda": self.launch.to_json(),
            "floor": {
                "compulsory_bytes": self.shape.compulsory_bytes,
                "flops": self.shape.flops,
                "floor_us": self.floor.us,
                "bound": self.floor.bound,
            },
            "modeled_percent_of_floor": self.floor.percent_of(self.launch.modeled_us),
            "triton": {
                **self.triton.to_json(),
                "modeled_us": self.triton_us,
                "modeled_overhead_us": self.triton_overhead_us,
            },
            "modeled_cuda_over_triton": self.cuda_over_triton,
            "modeling_seconds": self.modeling_seconds,
        }


def profile_case(
    case_id: str,
    shape: CaseShape,
    counters: LaunchCounters,
    gpu: GpuSpec,
    registers: Mapping[str, int] | None,
    calibration: Calibration,
    launch_mode: str = "stream",
    sass: Mapping[str, KernelSass] | None = None,
) -> CaseProfile:
    launch = model_launch(
        counters,
        gpu,
        registers,
        calibration=calibration,
        launch_mode=launch_mode,
        sass=sass,
    )
    spec = calibration.apply(gpu)
    overhead = spec.launch_overhead_us if launch_mode == "stream" else spec.graph_node_us
    return CaseProfile(case_id, shape, launch, floor(shape, spec), model_triton(shape, spec), overhead)

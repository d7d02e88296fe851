"""Everything a launch of the custom kernel needs besides the kernel: marshaled inputs, geometry, workspace.

Shared by the hardware backend and the emulation so both run the very same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddbench.inputs.layout import VerifyInputs
from ddbench.kernel.marshal import KernelInputs, marshal
from ddbench.kernel.plan import EMULATED_PLAN, PART_QUARTERS, LaunchPlan, PlanOptions, plan_launch
from ddbench.suite.presets import HEAD_DIM_V


@dataclass(frozen=True)
class PreparedLaunch:
    kernel: KernelInputs
    plan: LaunchPlan
    out: torch.Tensor
    ws_o: torch.Tensor | None  # (parts, block_m, 512) fp16 parts of split row tiles, only with a combine
    ws_lse: torch.Tensor | None  # (parts, block_m) fp32
    ws_scale: torch.Tensor | None  # (parts, block_m, 4) fp32: each part row quarter's power-of-two scale
    # (plan.arrival_counters,) int32 zeros the final merge counts arrivals in (and leaves zero), else None
    arrivals: torch.Tensor | None = None

    @property
    def total_rows(self) -> int:
        return self.kernel.q.shape[0] * self.kernel.heads


def prepare_launch(
    inputs: VerifyInputs, for_capacity: bool = False, options: PlanOptions = EMULATED_PLAN
) -> PreparedLaunch:
    """Marshal the inputs, then plan them with `options` (the GPU the launch is planned for, by default the
    one the emulation plans for; and what is forced, `cluster` 1 where the GPU has no thread-block clusters).

    The plan is for the call's own keys (kv_indptr[-1], read once on the host: over-allocated buffers then
    give the exact-size call's plan, hence its bits), or, `for_capacity`, for every key the buffers can hold
    (their shapes alone, nothing read: a launch prepared once and replayed at any lengths, as a CUDA graph
    is; the kernel cuts the real work into its CTAs on the device)."""
    k = marshal(inputs)
    keys = k.capacity_keys if for_capacity else int(inputs.kv_indptr[-1]) + k.q.shape[0]
    return launch_for(k, inputs.o_extend, planned_keys=keys, options=options)


def launch_for(
    k: KernelInputs, out: torch.Tensor, planned_keys: int | None = None, options: PlanOptions = EMULATED_PLAN
) -> PreparedLaunch:
    """The plan and workspace for already-marshaled inputs (the self-test's mutants marshal their own), for
    `planned_keys` keys (None: as many as the buffers hold). The arrival counters are fresh zeros here; a GPU
    backend keeps its own, left zero by every launch."""
    keys = k.capacity_keys if planned_keys is None else planned_keys
    plan = plan_launch(k.batch_size, k.heads, k.max_q_len, keys, options)
    ws_o = ws_lse = ws_scale = arrivals = None
    if plan.splits:
        parts = plan.workspace_parts
        m = plan.block_m
        ws_o = torch.empty(parts, m, HEAD_DIM_V, dtype=torch.float16, device=out.device)
        ws_lse = torch.empty(parts, m, dtype=torch.float32, device=out.device)
        ws_scale = torch.empty(parts, m, PART_QUARTERS, dtype=torch.float32, device=out.device)
    if plan.arrival_counters:
        arrivals = torch.zeros(plan.arrival_counters, dtype=torch.int32, device=out.device)
    return PreparedLaunch(k, plan, out, ws_o, ws_lse, ws_scale, arrivals)

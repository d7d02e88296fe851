"""`cuda`: the custom kernel on the local GPU, through the same marshaling and plan as `cuda-emu`.

`prepare` does everything but the kernel (marshaling: some 60 small torch ops; device properties; the
workspace of split row tiles), so a timed sample or a captured CUDA graph holds the extension call alone.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ddbench.backends.protocol import Availability, Capabilities, Launch
from ddbench.inputs.layout import VerifyInputs
from ddbench.kernel.build import nvcc_available
from ddbench.kernel.launch import PreparedLaunch, prepare_launch
from ddbench.kernel.marshal import marshal_into
from ddbench.kernel.plan import MAX_CLUSTER, MAX_ROW_GROUPS, LaunchPlan, PlanOptions, dram_pace_of


class CudaKernelBackend:
    name = "cuda"
    capabilities = Capabilities(lse=True)

    def __init__(
        self,
        ctas: int | None = None,
        whole_row_tiles: bool | None = None,
        row_groups: int | None = None,
        cluster: int | None = None,
        combine_rows: int | None = None,
        build_if_missing: bool = True,
        forced: PlanOptions | None = None,
    ) -> None:
        # What the launches force of the plan (None: its own choice, ddbench/kernel/plan.py); the GPU's own
        # fields are filled in from the device at each prepare. `cluster`: clusters from sm_90 only.
        self.forced = forced or PlanOptions(
            ctas=ctas,
            whole_row_tiles=whole_row_tiles,
            row_groups=row_groups,
            cluster=cluster,
            combine_rows=combine_rows,
        )
        self.build_if_missing = build_if_missing  # False in a server: only a build made beforehand loads
        self.last_plan: LaunchPlan | None = None  # the latest `prepare`'s (the device check's sweep)
        self._extension: ModuleType | None = None
        self._problem: str | None = None
        self._clusters_at_once: dict[int, int] = {}  # by device index: the driver's count, asked once

    def _load(self) -> ModuleType:
        if self._extension is not None:
            return self._extension
        if self._problem is None:
            if not torch.cuda.is_available():
                self._problem = "no CUDA GPU here (torch.cuda.is_available() is False)"
            elif self.build_if_missing and (reason := nvcc_available()) is not None:
                self._problem = f"cannot build the kernel: {reason}"
            else:
                from ddbench.kernel.cuda_build import KernelNotBuilt, load_cuda_extension

                try:
                    self._extension = load_cuda_extension(build=self.build_if_missing)
                except KernelNotBuilt as err:
                    self._problem = str(err)
                except Exception as err:  # a failed JIT build makes the backend unavailable, with the log
                    self._problem = f"kernel build failed: {type(err).__name__}: {err}"
        if self._extension is None:
            raise RuntimeError(self._problem)
        return self._extension

    def availability(self) -> Availability:
        try:
            self._load()
        except RuntimeError as err:
            return Availability.no(str(err))
        major, minor = torch.cuda.get_device_capability()
        return Availability.yes(f"kernels/verify on {torch.cuda.get_device_name()} (sm_{major}{minor})")

    def _at_once(self, extension: ModuleType, device: torch.device) -> int:
        """Clusters of MAX_CLUSTER verify CTAs the GPU runs at once (one CTA an SM at either row width), asked
        on the current device, as the launch is made."""
        key = -1 if device.index is None else device.index
        if key not in self._clusters_at_once:
            self._clusters_at_once[key] = int(extension.max_active_clusters(MAX_CLUSTER, MAX_ROW_GROUPS))
        return self._clusters_at_once[key]

    def prepare(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        """Planned for the call's own lengths (kv_indptr[-1] read once here, before the launch)."""
        return self._prepared(inputs, lse, for_capacity=False)[1]

    def unsupported(self, inputs: VerifyInputs) -> str | None:
        """Why these inputs cannot run here: the kernel runs on CUDA tensors only."""
        return None if inputs.q_extend.is_cuda else f"tensors on {inputs.device}, not a CUDA GPU"

    def launch_in_capture(self, inputs: VerifyInputs) -> torch.Tensor:
        """Launch now, inside a CUDA graph the caller is capturing (SGLang's graph runner): planned for the
        buffers' capacity, the lengths marshaled on the device, so every replay of the caller's graph reads
        the lengths its buffers then hold. Nothing here reads a length on the host."""
        with torch.cuda.device(inputs.device):
            return self._prepared(inputs, None, for_capacity=True)[1]()

    def prepare_replayable(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        """Planned once for the buffers' capacity and captured as a CUDA graph: the marshaling of the lengths
        (the offsets and mask words, on the device) and the kernel. Each launch replays the graph, reading
        whatever lengths the buffers hold then; no host synchronisation anywhere in it."""
        with torch.cuda.device(inputs.device):
            launch, kernel_only = self._prepared(inputs, lse, for_capacity=True)

            def marshal_and_launch() -> torch.Tensor:
                marshal_into(inputs, launch.kernel)
                return kernel_only()

            # warm-up on a side stream before the capture, as torch asks: attributes set, first call done
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                marshal_and_launch()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                marshal_and_launch()

        def replay() -> torch.Tensor:
            graph.replay()
            return launch.out

        return replay

    def _prepared(
        self, inputs: VerifyInputs, lse: torch.Tensor | None, for_capacity: bool
    ) -> tuple[PreparedLaunch, Launch]:
        extension = self._load()
        device = torch.cuda.get_device_properties(inputs.device)
        # Thread-block clusters from sm_90, as many as the GPU runs at once (a cluster's CTAs need SMs of one
        # GPC; the driver says how many clusters of 8 fit, one CTA an SM at either row width): the plan's
        # one wave must stay one.
        clusters = device.major >= 9
        forced = self.forced
        # a forced CTA count or cluster of 1 forms no clusters, so the driver need not be asked
        planned_clusters = clusters and forced.ctas is None and forced.cluster != 1
        options = forced.but(
            sm_count=device.multi_processor_count,
            dram_pace=dram_pace_of(device.name),
            max_clusters=self._at_once(extension, inputs.device) if planned_clusters else None,
            cluster=forced.cluster if clusters else 1,
        )
        launch = prepare_launch(inputs, for_capacity=for_capacity, options=options)
        plan = launch.plan
        if plan.cluster > 1 and plan.ctas // plan.cluster > extension.max_active_clusters(
            plan.cluster, plan.row_groups
        ):
            launch = prepare_launch(inputs, for_capacity=for_capacity, options=options.but(cluster=1))
        self.last_plan = launch.plan
        k, out = launch.kernel, launch.out
        empty = torch.empty(0, dtype=torch.float32, device=inputs.device)
        arguments = (
            k.q,
            k.kv,
            k.kv_draft,
            k.kv_slots,
            k.slot_offsets,
            k.kv_offsets,
            k.q_offsets,
            k.mask_words,
            out,
            lse,
            launch.ws_o if launch.ws_o is not None else empty,
            launch.ws_lse if launch.ws_lse is not None else empty,
            launch.ws_scale if launch.ws_scale is not None else empty,
            launch.arrivals,  # the final merge's counters (zeros, left zero by every launch of them), or None
            k.sm_scale,
            launch.plan.ctas,
            launch.plan.whole_row_tiles,
            launch.plan.row_groups,
            launch.plan.combine_halves,
            launch.plan.combine_rows,
            launch.plan.cluster,
        )

        def kernel_only() -> torch.Tensor:
            extension.verify(*arguments)
            return out

        return launch, kernel_only

    def run(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> torch.Tensor:
        return self.prepare(inputs, lse)()

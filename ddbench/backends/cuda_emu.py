"""`cuda-emu`: the custom kernel's own source (kernels/verify/verify_attn.cuh) run by the CPU emulation.

Same marshaling and launch geometry as the hardware backend; g++ builds the emulation library on first use.
"""

from __future__ import annotations

import ctypes
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ddbench.backends.protocol import Availability, Capabilities, Launch
from ddbench.counters import LaunchCounters, parse_counters
from ddbench.inputs.layout import TENSOR_FIELDS, VerifyInputs
from ddbench.kernel.build import KernelBuildError, build_emulation_library, find_kernels_dir
from ddbench.kernel.launch import PreparedLaunch, prepare_launch
from ddbench.kernel.marshal import marshal_into
from ddbench.kernel.plan import DEFAULT_DRAM_PACE, DEFAULT_MAX_CLUSTERS, DEFAULT_SM_COUNT, PlanOptions
from ddbench.kernel.sanitizer import SanitizerReport, parse_sanitizer_report
from ddbench.kernel.work_shapes import verify_work_shapes
from ddbench.kernel.work_split import cta_arrivals, last_arrivals, request_extents

_ERROR_BYTES = 4096
# q, kv, kv_draft, kv_slots, slot_offsets, kv_offsets, q_offsets, mask_words, out, lse, ws_o, ws_lse,
# ws_scale, arrivals
BUFFERS = 14
_EMU_SOURCE = Path("verify") / "verify_emu.cpp"


class KernelEmulationError(RuntimeError):
    """The emulation stopped the launch: divergence, a bad shared-memory access, a bad configuration."""


def _pointer(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr() if t is not None else None)


class _EmulatedLaunch:
    """One call of the emulated kernel with arguments fixed by `prepare`.

    The arguments are raw pointers, so the tensors they point into are held here for the launch's lifetime.
    """

    def __init__(
        self,
        library: ctypes.CDLL,
        arguments: tuple[object, ...],
        error: ctypes.Array[ctypes.c_char],
        prepared: PreparedLaunch,
        lse: torch.Tensor | None,
    ) -> None:
        self.library, self.arguments, self.error = library, arguments, error
        self.prepared, self.lse, self.out = prepared, lse, prepared.out

    def __call__(self) -> torch.Tensor:
        if self.library.ddk_verify_emu(*self.arguments) != 0:
            raise KernelEmulationError(self.error.value.decode(errors="replace"))
        return self.out


def _extent(t: torch.Tensor | None) -> int:
    """The bytes a contiguous tensor spans from its data pointer: memcheck's extent for it."""
    return 0 if t is None else t.numel() * t.element_size()


_FLAG_COUNT, _FLAG_SANITIZE, _FLAG_GROUP = 1, 2, 4


@dataclass(frozen=True)
class TracedRun:
    """One traced launch: the output (bit-identical to `run`'s unless sampled) and what was asked for."""

    out: torch.Tensor
    counters: LaunchCounters | None
    sanitizer: SanitizerReport | None
    sampled: bool = False  # one verify CTA per work shape ran: `out` is not the kernel's result


class CudaEmuBackend:
    name = "cuda-emu"
    capabilities = Capabilities(lse=True)

    def __init__(
        self,
        ctas: int | None = None,
        workers: int | None = None,
        sm_count: int | None = None,
        whole_row_tiles: bool | None = None,
        row_groups: int | None = None,
        dram_pace: float | None = DEFAULT_DRAM_PACE,
        cluster: int | None = None,
        final_merge: bool | None = None,
        max_clusters: int | None = DEFAULT_MAX_CLUSTERS,
        combine_rows: int | None = None,
        plan: PlanOptions | None = None,
    ) -> None:
        """`plan` (ddbench/kernel/plan.py): the GPU the launches are planned for and what they force; the
        keywords build one where it is not given (None: the plan's own choice, on the GPU the emulation
        plans for unless told another's SMs, DRAM pace and clusters at once)."""
        self.plan = plan or PlanOptions(
            sm_count=DEFAULT_SM_COUNT if sm_count is None else sm_count,
            dram_pace=dram_pace,
            max_clusters=max_clusters,
            ctas=ctas,
            whole_row_tiles=whole_row_tiles,
            row_groups=row_groups,
            cluster=cluster,
            final_merge=final_merge,
            combine_rows=combine_rows,
        )
        self.workers = workers if workers is not None else int(os.environ.get("DDK_EMU_WORKERS", "0") or 0)
        self._library: ctypes.CDLL | None = None
        self._problem: str | None = None

    def _load(self) -> ctypes.CDLL:
        if self._library is not None:
            return self._library
        if self._problem:
            raise RuntimeError(self._problem)
        try:
            path = build_emulation_library([find_kernels_dir() / _EMU_SOURCE], "verify_emu")
            library = ctypes.CDLL(str(path))
        except (KernelBuildError, OSError) as err:
            self._problem = f"cannot build the kernel emulation: {err}"
            raise RuntimeError(self._problem) from None
        library.ddk_verify_emu.restype = ctypes.c_int
        library.ddk_verify_emu.argtypes = (
            [ctypes.c_void_p] * BUFFERS
            + [ctypes.c_int] * 10
            + [
                ctypes.c_float,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
            ]
        )
        library.ddk_verify_emu_traced.restype = ctypes.c_int
        library.ddk_verify_emu_traced.argtypes = (
            [ctypes.c_void_p] * BUFFERS
            + [ctypes.c_int] * 10
            + [ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_int]
            + [ctypes.POINTER(ctypes.c_int64)]
            + [ctypes.POINTER(ctypes.c_uint64)] * 2
            + [ctypes.c_int64]
            + [ctypes.POINTER(ctypes.c_void_p)] * 2
            + [ctypes.c_char_p, ctypes.c_int]
        )
        library.ddk_emu_free.restype = None
        library.ddk_emu_free.argtypes = [ctypes.c_void_p]
        self._library = library
        return library

    def availability(self) -> Availability:
        try:
            self._load()
        except RuntimeError as err:
            return Availability.no(str(err))
        return Availability.yes("kernels/verify/verify_attn.cuh under the ddk CPU emulation")

    def marshaled_launch(self, inputs: VerifyInputs, for_capacity: bool = False) -> PreparedLaunch:
        """Marshaling and plan (for the call's lengths, or `for_capacity`: see prepare_launch); the seam
        `ddbench selftest`'s mutants use to inject marshaling mistakes."""
        return prepare_launch(inputs, for_capacity=for_capacity, options=self.plan)

    def prepare(
        self, inputs: VerifyInputs, lse: torch.Tensor | None = None, for_capacity: bool = False
    ) -> _EmulatedLaunch:
        """Marshal and plan once; the launch is the emulated kernel call alone."""
        library = self._load()
        launch, pointers, scalars = self._arguments(inputs, lse, for_capacity)
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        arguments = (*pointers, *scalars, self.workers, error, _ERROR_BYTES)
        return _EmulatedLaunch(library, arguments, error, launch, lse)

    def prepare_replayable(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        """Marshal and plan once, for the buffers' capacity; each launch marshals the lengths the buffers hold
        then into the same tensors (as a replayed CUDA graph does) and runs the kernel of that one plan.
        Buffers on a GPU are mirrored on the CPU once and copied into the mirror at each launch."""
        host = inputs if inputs.device.type == "cpu" else inputs.to("cpu")
        launch = self.prepare(host, lse, for_capacity=True)

        def replay() -> torch.Tensor:
            if host is not inputs:
                for name in TENSOR_FIELDS:
                    if name not in ("o_extend", "v_buffer"):  # the output is the launch's; v_buffer a view
                        getattr(host, name).copy_(getattr(inputs, name))
            marshal_into(host, launch.prepared.kernel)
            return launch()

        return replay

    def run(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> torch.Tensor:
        return self.prepare(inputs, lse)()

    def run_traced(
        self,
        inputs: VerifyInputs,
        lse: torch.Tensor | None = None,
        *,
        counters: bool = True,
        sanitize: bool = False,
        group_shapes: bool = False,
        late_wait_phases: int = 1,
        one_cta_per_shape: bool = False,
        for_capacity: bool = False,
    ) -> TracedRun:
        """One launch with exact counters and/or the sanitizer (see docs/emulation.md); `run` is untouched.
        `for_capacity`: planned for what the buffers hold, as `prepare_replayable` plans (see prepare_launch).

        Every buffer the kernel is given is registered with its extent, so memcheck can name it. A launch
        the emulation stops (divergence, a bad shared-memory address) raises KernelEmulationError as `run`.

        `one_cta_per_shape`: emulate one verify CTA of each work shape (`ddbench.kernel.work_shapes`) and
        count it for all of its shape; the combine runs whole on a prefilled workspace (weight-1 zero parts).
        For big cases: the counts docs/emulation.md calls exact stay exact, unique sectors become a lower
        bound, and the output is not computed.
        """
        if not (counters or sanitize):
            raise ValueError("run_traced: ask for counters, the sanitizer, or both")
        if late_wait_phases < 0:
            raise ValueError("late_wait_phases must be >= 0")
        library = self._load()
        launch, tensors, scalars = self._arguments(inputs, lse, for_capacity)
        extents = (ctypes.c_int64 * BUFFERS)(*(_extent(t) for t in self._buffers(launch, lse)))
        flags = (_FLAG_COUNT if counters else 0) | (_FLAG_SANITIZE if sanitize else 0)
        flags |= _FLAG_GROUP if group_shapes else 0
        subset = weights = None
        if one_cta_per_shape:
            k = launch.kernel
            shapes = verify_work_shapes(launch.plan, k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist())
            subset = (ctypes.c_uint64 * len(shapes.representatives))(*shapes.representatives)
            weights = (ctypes.c_uint64 * len(shapes.weights))(*shapes.weights)
            self._prefill_workspace(launch)
            self._seed_arrivals(launch, shapes.representatives)
        counters_text, sanitizer_text = ctypes.c_void_p(), ctypes.c_void_p()
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        code = library.ddk_verify_emu_traced(
            *tensors,
            *scalars,
            self.workers,
            flags,
            late_wait_phases,
            extents,
            subset,
            weights,
            len(subset) if subset is not None else 0,
            ctypes.byref(counters_text),
            ctypes.byref(sanitizer_text),
            error,
            _ERROR_BYTES,
        )
        texts = []
        for handle in (counters_text, sanitizer_text):
            texts.append(ctypes.string_at(handle.value).decode() if handle.value else None)
            if handle.value:
                library.ddk_emu_free(handle)
        if code != 0:
            raise KernelEmulationError(error.value.decode(errors="replace"))
        if (counters and texts[0] is None) or (sanitize and texts[1] is None):
            raise KernelEmulationError("the emulation returned no report (out of memory?)")
        return TracedRun(
            out=launch.out,
            counters=parse_counters(json.loads(texts[0])) if texts[0] is not None else None,
            sanitizer=parse_sanitizer_report(json.loads(texts[1])) if texts[1] is not None else None,
            sampled=one_cta_per_shape,
        )

    @staticmethod
    def _prefill_workspace(launch: PreparedLaunch) -> None:
        """Weight-1 parts where the CTAs that will not run would write theirs: the combine reads them all."""
        if launch.ws_o is not None and launch.ws_lse is not None and launch.ws_scale is not None:
            launch.ws_o.zero_()
            launch.ws_lse.zero_()
            launch.ws_scale.fill_(1.0)

    @staticmethod
    def _seed_arrivals(launch: PreparedLaunch, subset: tuple[int, ...]) -> None:
        """Counters short of a sampled CTA's parts where it arrives last in a full run: it merges there, as
        that CTA would (its shape says so), over the prefilled workspace."""
        if launch.arrivals is None:
            return
        k = launch.kernel
        requests = request_extents(k.heads, k.kv_offsets.tolist(), k.q_offsets.tolist(), launch.plan.block_m)
        arrivals = cta_arrivals(launch.plan, requests)
        last = last_arrivals(arrivals)
        seen: dict[int, int] = {}  # arrivals of the sampled CTAs so far, by counter
        for cta in subset:
            for a in arrivals[cta]:
                counter = a.counter + a.lane
                if last[counter] == cta:
                    launch.arrivals[counter] = a.expected - a.parts - seen.get(counter, 0)
                seen[counter] = seen.get(counter, 0) + a.parts

    @staticmethod
    def _buffers(launch: PreparedLaunch, lse: torch.Tensor | None) -> list[torch.Tensor | None]:
        k = launch.kernel
        return [
            k.q, k.kv, k.kv_draft, k.kv_slots, k.slot_offsets, k.kv_offsets, k.q_offsets, k.mask_words,
            launch.out, lse, launch.ws_o, launch.ws_lse, launch.ws_scale, launch.arrivals,
        ]  # fmt: skip

    def _arguments(
        self, inputs: VerifyInputs, lse: torch.Tensor | None, for_capacity: bool = False
    ) -> tuple[PreparedLaunch, list[ctypes.c_void_p], list[int | float]]:
        """The launch and the ABI's leading arguments: the buffers, then the shape scalars and the scale."""
        if lse is not None:
            expected = (inputs.q_extend.shape[0], inputs.q_extend.shape[1])
            shaped = lse.dtype == torch.float32 and tuple(lse.shape) == expected and lse.is_contiguous()
            if not shaped or lse.is_cuda:
                raise ValueError(f"lse must be a contiguous CPU float32 tensor of shape {expected}")
        if inputs.device.type != "cpu":
            inputs = inputs.to("cpu")
        # (the keyword only where asked: the self-test's and tests' seams take the inputs alone)
        launch = (
            self.marshaled_launch(inputs, for_capacity=True)
            if for_capacity
            else self.marshaled_launch(inputs)
        )
        k, plan = launch.kernel, launch.plan
        tensors = [
            k.q, k.kv, k.kv_draft, k.kv_slots, k.slot_offsets, k.kv_offsets, k.q_offsets, k.mask_words,
            launch.out,
        ]  # fmt: skip
        if not all(t.is_contiguous() for t in tensors):
            raise ValueError("the emulated kernel needs contiguous tensors")
        pointers = [
            _pointer(t) for t in (*tensors, lse, launch.ws_o, launch.ws_lse, launch.ws_scale, launch.arrivals)
        ]
        scalars: list[int | float] = [
            launch.total_rows,
            k.heads,
            k.mask_words.shape[1],
            k.batch_size,
            plan.ctas,
            plan.whole_row_tiles,
            plan.row_groups,
            plan.combine_halves,
            plan.combine_rows,
            plan.cluster,
            k.sm_scale,
        ]
        return launch, pointers, scalars

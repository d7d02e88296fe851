"""`cuda-emu`: the custom kernel's own source (kernels/verify/verify_attn.cuh) run by the CPU emulation.

Same marshaling and launch geometry as the hardware backend; g++ builds the emulation library on first use.
As for `cuda`, `prepare` marshals and plans, and the launch it returns is the emulated kernel alone.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch

from ddbench.backends.protocol import Availability, Capabilities, Launch
from ddbench.inputs.layout import VerifyInputs
from ddbench.kernel.build import KernelBuildError, build_emulation_library, find_kernels_dir
from ddbench.kernel.launch import PreparedLaunch, prepare_launch

_ERROR_BYTES = 4096
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
        out: torch.Tensor,
        keep_alive: tuple[object, ...],
    ) -> None:
        self.library, self.arguments, self.error, self.out = library, arguments, error, out
        self.keep_alive = keep_alive

    def __call__(self) -> torch.Tensor:
        if self.library.ddk_verify_emu(*self.arguments) != 0:
            raise KernelEmulationError(self.error.value.decode(errors="replace"))
        return self.out


class CudaEmuBackend:
    name = "cuda-emu"
    capabilities = Capabilities(lse=True)

    def __init__(self, num_splits: int | None = None, workers: int | None = None) -> None:
        self.num_splits = num_splits  # None: the same heuristic as on a GPU
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
            [ctypes.c_void_p] * 10
            + [ctypes.c_int] * 6
            + [
                ctypes.c_float,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
            ]
        )
        self._library = library
        return library

    def availability(self) -> Availability:
        try:
            self._load()
        except RuntimeError as err:
            return Availability.no(str(err))
        return Availability.yes("kernels/verify/verify_attn.cuh under the ddk CPU emulation")

    def marshaled_launch(self, inputs: VerifyInputs) -> PreparedLaunch:
        """Marshaling and plan; the seam `ddbench selftest`'s mutants use to inject marshaling mistakes."""
        return prepare_launch(inputs, num_splits=self.num_splits)

    def prepare(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        library = self._load()
        if lse is not None:
            expected = (inputs.q_extend.shape[0], inputs.q_extend.shape[1])
            shaped = lse.dtype == torch.float32 and tuple(lse.shape) == expected and lse.is_contiguous()
            if not shaped or lse.is_cuda:
                raise ValueError(f"lse must be a contiguous CPU float32 tensor of shape {expected}")
        if inputs.device.type != "cpu":
            inputs = inputs.to("cpu")
        launch = self.marshaled_launch(inputs)
        k, plan = launch.kernel, launch.plan
        tensors = [k.q, k.kv, k.kv_slots, k.kv_offsets, k.q_offsets, k.mask_words, launch.out]
        if not all(t.is_contiguous() for t in tensors):
            raise ValueError("the emulated kernel needs contiguous tensors")
        error = ctypes.create_string_buffer(_ERROR_BYTES)
        arguments = (
            *(_pointer(t) for t in tensors),
            _pointer(lse),
            _pointer(launch.ws_o),
            _pointer(launch.ws_lse),
            launch.total_rows,
            k.heads,
            k.mask_words.shape[1],
            plan.num_splits,
            plan.row_tiles,
            k.batch_size,
            k.sm_scale,
            self.workers,
            error,
            _ERROR_BYTES,
        )

        return _EmulatedLaunch(library, arguments, error, launch.out, keep_alive=(launch, lse))

    def run(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> torch.Tensor:
        return self.prepare(inputs, lse)()

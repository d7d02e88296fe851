"""Every build the device check needs, at once: on a fresh GPU machine each is a minute of nvcc or g++.

The kernel's PyTorch binding, the fragment probe's, and the emulation libraries (the probe's and the
kernel's, for the primitives and the calibration) compile in separate processes, side by side; the steps
that follow then load each from its cache. A failed build is reported here and again by the step that
needs it.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def _cuda_binding() -> None:
    from ddbench.kernel.cuda_build import load_cuda_extension

    load_cuda_extension()


def _probe_binding() -> None:
    from ddbench.device.fragments import PROBE_CUDA
    from ddbench.kernel.cuda_build import load_cuda_extension

    load_cuda_extension(PROBE_CUDA, "ddbench_fragment_probe")


def _emulation() -> None:
    from ddbench.backends.cuda_emu import CudaEmuBackend
    from ddbench.device.fragments import PROBE_EMU
    from ddbench.kernel.build import build_emulation_library, find_kernels_dir

    build_emulation_library([find_kernels_dir() / PROBE_EMU], "fragment_probe")
    status = CudaEmuBackend().availability()
    if not status.ok:
        raise RuntimeError(status.detail)


BUILDS: dict[str, Callable[[], None]] = {
    "cuda binding": _cuda_binding,
    "probe binding": _probe_binding,
    "emulation": _emulation,
}


def _timed(name: str) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        BUILDS[name]()
        outcome: dict[str, Any] = {"ok": True}
    except Exception as err:  # reported, not raised: the other builds go on
        outcome = {
            "ok": False,
            "error": f"{type(err).__name__}: {err}"[-4000:],
            "tb": traceback.format_exc()[-2000:],
        }
    return {**outcome, "seconds": round(time.perf_counter() - start, 1)}


def build_all() -> dict[str, dict[str, Any]]:
    """Each build's outcome by name; spawned processes (no CUDA context is forked)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(BUILDS), mp_context=context) as pool:
        futures = {name: pool.submit(_timed, name) for name in BUILDS}
        return {name: future.result() for name, future in futures.items()}

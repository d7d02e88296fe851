"""Clocks: CUDA events around the kernel alone on a GPU, the host's perf counter on the CPU, and the SM clock
through NVML so samples taken while the GPU throttled can be marked."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

# NVML clocks-event reasons that mean "slower than the application clock" (not idle, not the app setting).
_THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # sw power cap, hw slowdown, sw/hw thermal, power brake


def time_host_us(call: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - start) / 1000.0


def time_cuda_us(call: Callable[[], object], before: Callable[[], object] | None = None) -> float:
    """Events on the current stream around `call` only; `before` (an L2 flush, a re-poison) runs outside."""
    if before is not None:
        before()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


class L2Flusher:
    """Cold-L2 mode: write a buffer twice the L2's size before each sample, evicting the kernel's data."""

    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2_bytes = getattr(props, "L2_cache_size", 0) or 128 * 2**20
        self.buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


class SmClockMonitor:
    """SM clock and throttle state of GPU 0 via NVML (nvidia-ml-py); inert where NVML is missing."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception as err:  # no NVML: report why, time anyway
            self.reason = f"NVML unavailable: {type(err).__name__}: {err}"

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> tuple[int, bool] | None:
        """(SM clock in MHz, throttled?) now, or None without NVML."""
        if self._handle is None:
            return None
        nvml = self._nvml
        clock = nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)
        reasons_of = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons_of = reasons_of or nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # older nvidia-ml-py
        return clock, bool(reasons_of(self._handle) & _THROTTLE_BITS)

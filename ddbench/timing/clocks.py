"""Clocks: CUDA events around the kernel alone on a GPU, the host's perf counter on the CPU, and the SM clock
through NVML so samples taken while the GPU throttled can be marked.

Host time is read through `HOST`, a `Clock`: the tests put a fake one there that their fake backends
advance, so no assertion anywhere depends on how loaded the machine is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import torch

# NVML clocks-event reasons that mean "slower than the application clock" (not idle, not the app setting).
_THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # sw power cap, hw slowdown, sw/hw thermal, power brake

T = TypeVar("T")


class Clock(Protocol):
    def now_ns(self) -> int: ...


class HostClock:
    """The host's monotonic high-resolution clock."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()


HOST: Clock = HostClock()


def host_clock(clock: Clock | None = None) -> Clock:
    """`clock`, or the process's host clock, looked up on each call so that a test can replace it."""
    return clock if clock is not None else HOST


def time_host_us(call: Callable[[], object], clock: Clock | None = None) -> float:
    clock = host_clock(clock)
    start = clock.now_ns()
    call()
    return (clock.now_ns() - start) / 1000.0


def timed_host_call(
    call: Callable[[], T], sync: Callable[[], None] | None = None, clock: Clock | None = None
) -> tuple[T, float]:
    """`call()`'s result and its host time in us; with `sync` (a GPU), the work it queued is included."""
    clock = host_clock(clock)
    if sync is not None:
        sync()
    start = clock.now_ns()
    result = call()
    if sync is not None:
        sync()
    return result, (clock.now_ns() - start) / 1000.0


# A spin of this many GPU cycles (~50 µs at 2 GHz) is queued before the start event, so the host has queued
# the event and the launch before the GPU reaches them: otherwise a short kernel's time holds the host's
# launch latency (measured on an H200: a 12.4 µs launch read 18.2 µs warm; serving replays one graph per step,
# with no host between its kernels). A fixed spin cannot promise it (nvbench's blocking kernel waits for the
# host instead): a sample whose spin ran out first says so (time_cuda_us's second result).
QUEUE_AHEAD_CYCLES = 100_000


def time_cuda_us(
    call: Callable[[], object], before: Callable[[], object] | None = None
) -> tuple[float, bool]:
    """Events on the current stream around `call` only; `before` (an L2 flush, a re-poison) runs outside,
    then the GPU is held a moment so that the host's launch cost stays outside the events. Returns the µs
    and whether the hold lasted: False where the GPU had passed the start event by the time the host had
    queued the launch (the sample may hold host time)."""
    if before is not None:
        before()
    torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    held = not start.query()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0, held


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

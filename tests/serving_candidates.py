"""Candidates the serving-plugin tests load by `module:attr`, as DDBENCH_APPLY_BACKEND names a user's kernel:
each one a fault a live server must survive (a wrong kernel, one that raises, one that writes NaN), and two
test doubles (one that does nothing, for the hook's own cost; one recorded into a CUDA graph)."""

from __future__ import annotations

from ddbench.backends.protocol import Availability
from ddbench.backends.reference import ReferenceBackend


class _Candidate:
    name = "candidate"

    def availability(self) -> Availability:
        return Availability.yes("a test candidate")


class WrongKernel(_Candidate):
    """The attention, 2 % too large everywhere: plainly outside any bound (about 5 bf16 steps)."""

    def run(self, inputs):
        out = ReferenceBackend().run(inputs)
        inputs.o_extend.copy_(out.float() * 1.02)
        return inputs.o_extend


class RaisingKernel(_Candidate):
    def run(self, inputs):
        raise RuntimeError("an illegal memory access was encountered (simulated)")


class NanKernel(_Candidate):
    """Right everywhere but one element."""

    def run(self, inputs):
        out = ReferenceBackend().run(inputs)
        out[0, 0, 7] = float("nan")
        return out


class NoOpKernel(_Candidate):
    """Writes nothing: what the hook's own host cost is measured with."""

    def run(self, inputs):
        return inputs.o_extend


class RecordingKernel(_Candidate):
    """Says which launch a call took (SGLang's graph capture, or an eager call), and computes nothing."""

    def __init__(self):
        self.launches: list[str] = []

    def run(self, inputs):
        self.launches.append("eager")
        return ReferenceBackend().run(inputs)

    def launch_in_capture(self, inputs):
        self.launches.append("capture")
        return ReferenceBackend().run(inputs)


class Unavailable(_Candidate):
    def availability(self) -> Availability:
        return Availability.no("no GPU of the kind this kernel needs (simulated)")

    def run(self, inputs):
        raise AssertionError("an unavailable candidate must never be run")

"""`captured` and `captured-candidate`: outputs recorded with a replayed capture, as more sides to compare.

`captured` is what the serving kernel wrote; `captured-candidate` is what the candidate wrote for the same
call when a serving plugin's comparison breached (a breach capture holds both), so a breach is judged and
explained again anywhere, with no GPU.
"""

from __future__ import annotations

import torch

from ddbench.backends.protocol import Availability
from ddbench.inputs.layout import VerifyInputs


class CapturedOutputBackend:
    name = "captured"
    _field = "captured_output"
    _missing = "not a replayed capture: there is no captured output to compare with"

    def availability(self) -> Availability:
        return Availability.yes("the output recorded with each replayed capture")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        recorded = getattr(inputs, self._field)
        if recorded is None:
            raise ValueError(self._missing)
        inputs.o_extend.copy_(recorded)
        return inputs.o_extend


class CapturedCandidateBackend(CapturedOutputBackend):
    name = "captured-candidate"
    _field = "candidate_output"
    _missing = "not a breach capture: there is no candidate output recorded with it"

    def availability(self) -> Availability:
        return Availability.yes("the candidate's output recorded with each replayed breach capture")

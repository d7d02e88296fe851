"""`captured`: the output the serving kernel produced for a replayed capture, as one more side to compare."""

from __future__ import annotations

import torch

from ddbench.backends.protocol import Availability
from ddbench.inputs.layout import VerifyInputs


class CapturedOutputBackend:
    name = "captured"

    def availability(self) -> Availability:
        return Availability.yes("the output recorded with each replayed capture")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        if inputs.captured_output is None:
            raise ValueError("not a replayed capture: there is no captured output to compare with")
        inputs.o_extend.copy_(inputs.captured_output)
        return inputs.o_extend

"""Generation cases on a local checkpoint: what the suite layer needs to know about one.

As with captures, the suite layer reads no checkpoint itself: it is handed a loader
(ddbench.inputs.suite_file wires the reader of ddbench.inputs), which checks the folder, its config and the
headers of the tensors the case's layers need, and says what a case takes from it: the heads, the size,
the softmax scale, and the bytes the weights will hold (the case's estimate counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckpointInfo:
    name: str  # as the suite wrote it: recorded in the workload and the results
    folder: str  # where it is read from (relative paths resolved against the suite file's folder)
    model_type: str
    heads: int  # num_attention_heads: all of them; a TP rank holds heads / attention TP
    hidden: int
    vocab: int
    layers: int  # the checkpoint's; a case reads its first `generation.layers` of them
    sm_scale: float  # qk_head_dim^-0.5 with YaRN's mscale^2
    base_bytes: int  # the embedding, the final norm and the head, as held once read
    layer_bytes: tuple[int, ...]  # each layer the case reads, as held once read
    working_bytes: int  # the largest temporary (a weight upcast to float32, an fp8 weight being dequantized)

    def weight_bytes(self, layers: int) -> int:
        return self.base_bytes + sum(self.layer_bytes[:layers]) + self.working_bytes

    def to_json(self) -> dict[str, Any]:
        """The parts that name the workload (the folder as written, not where it is on this machine)."""
        return {"path": self.name, "model_type": self.model_type, "heads": self.heads}


CheckpointLoader = Callable[[str, "int | None"], CheckpointInfo]
"""(the folder as the suite wrote it, the layers the case reads or None for all) -> what the case needs;
an InputError naming the file and field or tensor when the folder cannot serve."""

"""Torch reference: attention recomputed from SGLang's layout by its own gather, in float32 or float64.

It shares no code with the kernels under test: it reads each request's prefix slots through kv_indptr/
kv_indices, the draft keys from k_extend, and the tree mask with SGLang's row stride prefix + q_len.
"""

from __future__ import annotations

import torch

from ddbench.backends.protocol import Availability
from ddbench.inputs.layout import VerifyInputs


class ReferenceBackend:
    def __init__(self, accumulate: torch.dtype = torch.float32) -> None:
        self.accumulate = accumulate
        self.name = "reference" if accumulate == torch.float32 else "reference-fp64"

    def availability(self) -> Availability:
        return Availability.yes(f"torch, {str(self.accumulate).removeprefix('torch.')} accumulation")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        x, acc = inputs, self.accumulate
        out = torch.empty(x.o_extend.shape, dtype=acc, device=x.device)
        dv = x.v_extend.shape[-1]
        qo, kv, mk = x.qo_indptr.tolist(), x.kv_indptr.tolist(), x.mask_indptr.tolist()
        for r in range(x.batch_size):
            q0, q1 = qo[r], qo[r + 1]
            q_len, prefix = q1 - q0, kv[r + 1] - kv[r]
            if q_len == 0:
                continue
            prefix_rows = x.k_buffer[x.kv_indices[kv[r] : kv[r + 1]].long(), 0]
            keys = torch.cat([prefix_rows, x.k_extend[q0:q1, 0]]).to(acc)
            values = torch.cat(
                [x.v_buffer[x.kv_indices[kv[r] : kv[r + 1]].long(), 0], x.v_extend[q0:q1, 0]]
            ).to(acc)
            visible = x.custom_mask[mk[r] : mk[r + 1]].view(q_len, prefix + q_len).bool().clone()
            visible[:, :prefix] = True  # skip_prefix_custom_mask: the prefix columns are never read
            scores = torch.einsum("qhd,kd->hqk", x.q_extend[q0:q1].to(acc), keys) * x.sm_scale
            scores = scores.masked_fill(~visible, float("-inf"))
            out[q0:q1] = torch.einsum("hqk,kd->qhd", torch.softmax(scores, dim=-1), values[:, :dv])
        return out

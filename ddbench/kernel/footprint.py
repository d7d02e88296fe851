"""The distinct 32-byte sectors the verify kernel touches, from the launch's own buffers and plan (pure).

A sampled traced launch (one CTA per work shape) cannot count the launch-wide unique sectors, which are what
DRAM sees; they follow from the addresses alone: every (token, head) row of Q, every pool row a prefix key's
slot names, every row of the draft keys (kv_draft), the prefixes' slot indices, the three offsets, the mask
words of draft columns, the output rows of row tiles a CTA covers whole (and their LSE), and the fp16 parts
of the others (with their scales and LSE), a merging cluster's one part or output rows written where its first
CTA's would be; under the final merge also the output rows of split row tiles and the arrival counters.
Mirrors kernels/verify/verify_attn.cuh; a test checks it against fully emulated launches, sector for sector.
"""

from __future__ import annotations

import torch

from ddbench.counters import SECTOR_BYTES
from ddbench.inputs.footprint import FP32_BYTES as FP32
from ddbench.kernel.launch import PreparedLaunch
from ddbench.kernel.plan import PART_QUARTERS
from ddbench.kernel.work_split import (
    MERGE_NONE,
    MERGE_WHOLE,
    cta_arrivals,
    cta_merges,
    cta_segments,
    request_extents,
)
from ddbench.mla import HEAD_DIM_V, KV_ROW_BYTES

FP16 = 2


def _sectors(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Every sector id of the byte ranges [start, start + length) (int64 tensors of absolute addresses)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    if starts.numel() == 0:
        return torch.empty(0, dtype=torch.int64)
    first = starts // SECTOR_BYTES
    count = (starts + lengths - 1) // SECTOR_BYTES - first + 1
    offsets = torch.repeat_interleave(count.cumsum(0) - count, count)
    return torch.repeat_interleave(first, count) + torch.arange(int(count.sum())) - offsets


def verify_unique_sectors(launch: PreparedLaunch, lse: torch.Tensor | None = None) -> int:
    """Distinct sectors the verify kernel (not the combine) reads or writes in this launch."""
    k, plan = launch.kernel, launch.plan
    kv_offsets, q_offsets = k.kv_offsets.tolist(), k.q_offsets.tolist()
    requests = request_extents(k.heads, kv_offsets, q_offsets, plan.block_m)
    pieces: list[tuple[torch.Tensor, torch.Tensor]] = []

    def whole(t: torch.Tensor) -> None:
        pieces.append((torch.tensor([t.data_ptr()]), torch.tensor([t.numel() * t.element_size()])))

    whole(k.q)
    draft_row = k.kv_draft.shape[-1] * k.kv_draft.element_size()
    for r, g in enumerate(requests):  # the draft keys, read in place (where keys < q_len, only the last ones)
        if g.units:
            first = q_offsets[r] + max(0, -g.prefix)
            start, length = k.kv_draft.data_ptr() + first * draft_row, (q_offsets[r + 1] - first) * draft_row
            pieces.append((torch.tensor([start]), torch.tensor([length])))
    whole(k.slot_offsets)
    whole(k.kv_offsets)
    whole(k.q_offsets)
    prefixes = [max(g.prefix, 0) for g in requests]
    slot_bytes = k.kv_slots.element_size()
    slot_offsets = k.slot_offsets.tolist()
    firsts = torch.tensor(slot_offsets[:-1], dtype=torch.int64)
    # the prefixes' slot indices (the draft keys' are not read)
    pieces.append((k.kv_slots.data_ptr() + firsts * slot_bytes, torch.tensor(prefixes) * slot_bytes))
    prefix_slots = [k.kv_slots[slot_offsets[r] : slot_offsets[r] + n] for r, n in enumerate(prefixes)]
    slots = torch.unique(torch.cat([*prefix_slots, torch.empty(0, dtype=k.kv_slots.dtype)]).long())
    pieces.append((k.kv.data_ptr() + slots * KV_ROW_BYTES, torch.full_like(slots, KV_ROW_BYTES)))
    words = k.mask_words.shape[1]
    for r, g in enumerate(requests):  # the words of draft columns < q_len of every draft row
        rows = torch.arange(q_offsets[r], q_offsets[r + 1], dtype=torch.int64)
        used = -(-g.q_len // 32) if g.keys > g.prefix else 0
        pieces.append((k.mask_words.data_ptr() + rows * words * FP32, torch.full_like(rows, used * FP32)))
    out_row = HEAD_DIM_V * launch.out.element_size()
    merges = cta_merges(plan, requests)
    for cta, segments in enumerate(cta_segments(plan, requests)):
        merge = merges[cta]
        if merge != MERGE_NONE and cta % plan.cluster:
            continue  # its rows of the cluster's merge land where the first CTA's would: counted there
        for s in segments:
            g = requests[s.request]
            m = plan.block_m
            valid = min(m, g.rows - s.row_tile * m)
            local = torch.arange(s.row_tile * m, s.row_tile * m + valid, dtype=torch.int64)
            if s.slot < 0 or merge == MERGE_WHOLE or plan.final_merge:  # the final merge writes them too
                rows = q_offsets[s.request] * k.heads + local
                pieces.append((launch.out.data_ptr() + rows * out_row, torch.full_like(rows, out_row)))
                if lse is not None:
                    pieces.append((lse.data_ptr() + rows * FP32, torch.full_like(rows, FP32)))
            if s.slot >= 0 and merge != MERGE_WHOLE:
                assert launch.ws_o is not None and launch.ws_lse is not None and launch.ws_scale is not None
                part = s.slot * m + torch.arange(valid, dtype=torch.int64)
                for buffer, row_bytes in (
                    (launch.ws_o, HEAD_DIM_V * FP16),
                    (launch.ws_scale, PART_QUARTERS * FP32),
                    (launch.ws_lse, FP32),
                ):
                    pieces.append((buffer.data_ptr() + part * row_bytes, torch.full_like(part, row_bytes)))
    for arrivals in cta_arrivals(plan, requests):
        for a in arrivals:
            assert launch.arrivals is not None
            counters = torch.tensor([a.counter + a.lane], dtype=torch.int64)
            pieces.append((launch.arrivals.data_ptr() + counters * FP32, torch.full_like(counters, FP32)))
    starts = torch.cat([p[0] for p in pieces])
    lengths = torch.cat([p[1] for p in pieces])
    return int(torch.unique(_sectors(starts, lengths)).numel())

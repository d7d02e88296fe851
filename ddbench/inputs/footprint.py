"""Bytes of one case's inputs, counted from its shape before anything is allocated.

Mirrors `generate.py` tensor by tensor (bf16 = 2 bytes, int64 indices, a bool mask), so a case too big for
the machine can be refused before the generator tries to allocate it. Pure: no torch, no file access.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddbench.inputs.pool import pool_layout
from ddbench.inputs.served_buffers import mask_capacity
from ddbench.suite.model import Case
from ddbench.suite.presets import HEAD_DIM_QK, HEAD_DIM_V

BF16_BYTES = 2
FP32_BYTES = 4
INDEX_BYTES = 8  # int64 slots and mask offsets
INDPTR32_BYTES = 4  # qo_indptr and kv_indptr are int32


@dataclass(frozen=True)
class InputFootprint:
    """What the generator builds for a case, and what the attention over it touches."""

    tokens: int  # every request's prefix and draft tokens: the keys in the pool
    pool_rows: int  # rows of k_buffer: the tokens' scattered slots and the unused rows between them
    input_bytes: int  # the VerifyInputs tensors once built
    generation_peak_bytes: int  # while building: the inputs plus the float32 keys and queries drawn first
    score_elements: int  # sum over requests of heads x q_len x (prefix + q_len), each its own q_len
    output_bytes: int  # one bf16 output, (tokens to verify) x heads x 512


def pool_rows(
    prefix_lens: tuple[int, ...], q_lens: tuple[int, ...], page_size: int, min_rows: int = 0
) -> int:
    """`inputs/pool.py`'s pool size: every other slot (or page) is left unused, or a real pool's size."""
    keys = [p + q for p, q in zip(prefix_lens, q_lens, strict=True)]
    return pool_layout(keys, page_size, min_rows)[1]


def input_footprint(case: Case) -> InputFootprint:
    """The byte count of `generate_inputs(case)` (a replayed capture holds the same tensors, plus the
    recorded output, and is read whole once to check its hash)."""
    heads, total_q = case.heads_per_rank, case.total_q
    requests = list(zip(case.prefix_lens, case.q_lens, strict=True))
    tokens = sum(case.prefix_lens) + total_q
    rows = pool_rows(case.prefix_lens, case.q_lens, case.page_size, case.inputs.pool_rows)
    mask_bits = sum(q * (p + q) for p, q in requests)
    slots = tokens
    buffers = case.sglang_buffers
    if buffers is not None:  # sized as a server's (served_buffers.py), the pool as the group's largest call's
        slots = case.batch_size * buffers.max_context + total_q
        mask_bits = mask_capacity(case.batch_size, case.q_len, buffers.max_context)
        for prefixes in buffers.group_prefixes:
            rows = max(rows, pool_rows(prefixes, case.q_lens, case.page_size, case.inputs.pool_rows))
    output = total_q * heads * HEAD_DIM_V * BF16_BYTES
    tensors = (
        rows * HEAD_DIM_QK * BF16_BYTES  # k_buffer (v_buffer is a view of it)
        + total_q * heads * HEAD_DIM_QK * BF16_BYTES  # q_extend
        + total_q * (HEAD_DIM_QK + HEAD_DIM_V) * BF16_BYTES  # k_extend, v_extend
        + output  # o_extend
        + slots * INDEX_BYTES  # kv_indices and out_cache_loc
        + mask_bits  # custom_mask, one bool per bit
        + (case.batch_size + 1) * (2 * INDPTR32_BYTES + INDEX_BYTES)  # qo, kv (int32) and mask indptr
    )
    if case.capture is not None:
        # The recorded output rides along; the file's bytes are read whole to compare its SHA-256.
        input_bytes = tensors + output
        peak = 2 * input_bytes
    else:
        input_bytes = tensors
        # Drawn in float32 before the bf16 copies: keys (tokens x 576) and queries (T x H x 576), the keys'
        # bf16 copy on its way into the pool, and the slot permutations (int64, a few temporaries).
        drawn = tokens * HEAD_DIM_QK * (FP32_BYTES + BF16_BYTES) + total_q * heads * HEAD_DIM_QK * FP32_BYTES
        peak = input_bytes + drawn + 3 * slots * INDEX_BYTES
    scores = sum(heads * q * (p + q) for p, q in requests)
    return InputFootprint(tokens, rows, input_bytes, peak, scores, output)

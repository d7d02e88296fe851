"""Deliberately wrong backends, one per hypothesis: the suite must catch each and `explain` must name it.

- `mutant:<hypothesis>`: the torch reference path with the mistake (the hypothesis's first variant),
  rounded to bf16 like a kernel's output.
- `mutant-emu:<hypothesis>`: the custom kernel under the CPU emulation (`cuda-emu`) fed by a mutated copy
  of the marshaling adapter (`ddbench.kernel.marshal`), or with its output handled wrongly. These are the
  real thing: the very kernel source, given what a buggy adapter would give it. `v-columns` has none (V is
  the latent part of the kernel's own K rows; no adapter can hand it other columns), nor `splits-no-lse`
  (the kernel combines its own splits; an adapter cannot reach that), nor `row-shared-exponent` (applied
  to the kernel's bf16 output it rounds twice: elements near a step of the coarse grid land a step apart
  from the hypothesis, several channel ULPs, so no statement of it made after the kernel can be matched).

The mutated adapters are written out here on purpose, apart from `explain`'s hypotheses: the self-test
then checks two independent statements of each mistake against each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.backends.protocol import Availability, Backend, Capabilities, Launch
from ddbench.backends.registry import Families
from ddbench.explain.hypotheses import HYPOTHESES, SCALE_192, SCALE_576, find_hypothesis, mistaken_output
from ddbench.inputs.layout import VerifyInputs
from ddbench.kernel.launch import PreparedLaunch, launch_for
from ddbench.kernel.marshal import MASK_WORD_BITS, KernelInputs, marshal
from ddbench.mla import HEAD_DIM_V

REFERENCE_PREFIX, EMU_PREFIX = "mutant:", "mutant-emu:"

KernelEdit = Callable[[VerifyInputs, KernelInputs], KernelInputs]
OutputEdit = Callable[[torch.Tensor], torch.Tensor]


class ReferenceMutant:
    """The reference computation with one classic mistake."""

    def __init__(self, hypothesis: str) -> None:
        self.hypothesis = hypothesis
        self.name = REFERENCE_PREFIX + hypothesis
        self.variant = find_hypothesis(hypothesis).variants[0].name  # what mistaken_output computes

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(hypothesis=self.hypothesis)

    def availability(self) -> Availability:
        return Availability.yes(f"torch reference with the {self.hypothesis} mistake (self-test)")

    def run(self, inputs: VerifyInputs) -> torch.Tensor:
        predicted = mistaken_output(inputs, self.hypothesis)
        out = predicted.output.masked_fill(predicted.free[..., None], 0.0)  # empty rows: 0, as our kernel
        inputs.o_extend.copy_(out.to(inputs.o_extend.dtype))
        return inputs.o_extend


class EmuMutant(CudaEmuBackend):
    """The emulated custom kernel behind a marshaling adapter (or output handling) with one mistake."""

    def __init__(
        self,
        hypothesis: str,
        kernel_edit: KernelEdit | None = None,
        output_edit: OutputEdit | None = None,
        ctas: int | None = None,
    ) -> None:
        super().__init__(ctas=ctas)
        self.hypothesis = hypothesis
        self.name = EMU_PREFIX + hypothesis
        self.variant = EMU_VARIANTS.get(hypothesis) or find_hypothesis(hypothesis).variants[0].name
        self.kernel_edit, self.output_edit = kernel_edit, output_edit

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(lse=True, hypothesis=self.hypothesis)

    def marshaled_launch(self, inputs: VerifyInputs, for_capacity: bool = False) -> PreparedLaunch:
        k = marshal(inputs)
        if self.kernel_edit is not None:
            k = self.kernel_edit(inputs, k)
        # planned for the keys its own (mistaken) lists name, as the real backend plans a plain call
        return launch_for(k, inputs.o_extend, int(k.kv_offsets[-1]), self.plan)

    def prepare_replayable(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        """A mutant replays by running again: re-marshaling the buffers would undo its planted mistake."""
        return lambda: self.run(inputs, lse)

    def prepare(self, inputs: VerifyInputs, lse: torch.Tensor | None = None) -> Launch:
        launch, edit = super().prepare(inputs, lse), self.output_edit
        if edit is None:
            return launch

        def edited() -> torch.Tensor:
            out = launch()
            out.copy_(edit(out.clone()))
            return out

        return edited


# --- the mutated adapters -----------------------------------------------------------------------------------


def _requests(x: VerifyInputs) -> list[tuple[int, int, int, int, int]]:
    """(q0, q1, kv0, kv1, mask0) per request."""
    qo, kv, mk = x.qo_indptr.tolist(), x.kv_indptr.tolist(), x.mask_indptr.tolist()
    return [(qo[r], qo[r + 1], kv[r], kv[r + 1], mk[r]) for r in range(x.batch_size)]


def _key_lists(x: VerifyInputs, k: KernelInputs, lists: list[torch.Tensor]) -> KernelInputs:
    """The kernel handed these per-request lists of pool slots as its keys. It reads the last q_len keys of a
    list (its draft keys, to the kernel) in place from kv_draft, so kv_draft gets the pool rows those slots
    name there: the kernel then reads every key the list names, as an adapter with this mistake would have
    it do."""
    offsets = torch.tensor([0] + [len(s) for s in lists]).cumsum(0)
    kv_draft = k.kv_draft.clone()
    for (q0, q1, *_), slots in zip(_requests(x), lists, strict=True):
        prefix = len(slots) - (q1 - q0)  # what the kernel takes for the prefix (< 0: every key a draft)
        first = max(prefix, 0)
        rows = q0 + torch.arange(first, len(slots)) - prefix
        kv_draft[rows] = k.kv[slots[first:].long()]
    return dataclasses.replace(
        k,
        kv_slots=torch.cat([*lists, torch.empty(0, dtype=torch.int64)]).to(torch.int64),
        slot_offsets=offsets.to(torch.int32),  # a list's prefix keys lead it: its slots start with it
        kv_offsets=offsets.to(torch.int32),
        kv_draft=kv_draft,
    )


def _slot_lists(x: VerifyInputs, keys: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], k: KernelInputs):
    """Rebuild kv_slots and its offsets (and kv_draft) from `keys(prefix_slots, draft_slots)` per request."""
    lists = [
        keys(x.kv_indices[kv0:kv1].long(), x.out_cache_loc[q0:q1].long())
        for q0, q1, kv0, kv1, _ in _requests(x)
    ]
    return _key_lists(x, k, lists)


def _pack(bits: torch.Tensor, words_per_row: int) -> torch.Tensor:
    """(T, q) bool -> (T, W) int32 holding the uint32 bit words (bit j = draft column j)."""
    padded = torch.zeros(bits.shape[0], words_per_row * MASK_WORD_BITS, dtype=torch.int64)
    padded[:, : bits.shape[1]] = bits.long()
    weights = torch.ones(MASK_WORD_BITS, dtype=torch.int64) << torch.arange(MASK_WORD_BITS)
    words = (padded.view(bits.shape[0], words_per_row, MASK_WORD_BITS) * weights).sum(-1)
    return (words - ((words >= 2**31).long() << 32)).to(torch.int32)


def _mask(x: VerifyInputs, k: KernelInputs, read: Callable[[int, int, int], torch.Tensor]) -> KernelInputs:
    """Mask words from `read(mask0, prefix, q_len) -> (q_len, q_len) bool` per request."""
    total = x.q_extend.shape[0]
    bits = torch.zeros(total, max(x.max_len_extend, 1), dtype=torch.bool)
    for q0, q1, kv0, kv1, mask0 in _requests(x):
        q_len = q1 - q0
        bits[q0:q1, :q_len] = read(mask0, kv1 - kv0, q_len)
    return dataclasses.replace(k, mask_words=_pack(bits, k.mask_words.shape[1]))


def _read(x: VerifyInputs, flat: torch.Tensor) -> torch.Tensor:
    m = x.custom_mask.cpu()
    return (m[flat.clamp(max=m.numel() - 1)] != 0) & (flat < m.numel())


def _stride_prefix(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    def read(mask0: int, prefix: int, q_len: int) -> torch.Tensor:
        i, j = torch.arange(q_len)[:, None], torch.arange(q_len)[None, :]
        return _read(x, mask0 + i * prefix + prefix + j)  # the bug: stride prefix, not prefix + q_len

    return _mask(x, k, read)


def _column_major(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    def read(mask0: int, prefix: int, q_len: int) -> torch.Tensor:
        i, j = torch.arange(q_len)[:, None], torch.arange(q_len)[None, :]
        return _read(x, mask0 + j * (prefix + q_len) + prefix + i)  # the bug: [j, i] read for [i, j]

    return _mask(x, k, read)


def _causal(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _mask(x, k, lambda mask0, prefix, q_len: torch.ones(q_len, q_len, dtype=torch.bool).tril())


def _kv_indices_only(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _slot_lists(x, lambda prefix, draft: prefix, k)


def _slot_plus_one(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _slot_lists(x, lambda prefix, draft: torch.cat([prefix + 1, draft]), k)


def _draft_without_offset(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    loc = x.out_cache_loc.long()

    def keys(prefix: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        return torch.cat([prefix, loc[torch.arange(draft.numel()).clamp(max=loc.numel() - 1)]])

    return _slot_lists(x, keys, k)


def _drafts_twice(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _slot_lists(x, lambda prefix, draft: torch.cat([prefix, draft, draft]), k)


MUTANT_PREFIX_KEYS = 2048  # prefix-truncated: the adapter hands the kernel the last 2048 prefix keys


def _last_prefix_keys(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _slot_lists(x, lambda prefix, draft: torch.cat([prefix[-MUTANT_PREFIX_KEYS:], draft]), k)


def _prefix_without_offset(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    indices = x.kv_indices.long()
    return _slot_lists(x, lambda prefix, draft: torch.cat([indices[: prefix.numel()], draft]), k)


def _own_tree(x: VerifyInputs, mask0: int, prefix: int, q_len: int) -> torch.Tensor:
    """The (q_len, q_len) draft block at mask0, rows prefix + q_len apart: the right geometry."""
    i, j = torch.arange(q_len)[:, None], torch.arange(q_len)[None, :]
    return _read(x, mask0 + i * (prefix + q_len) + prefix + j)


def _mask_without_offset(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _mask(x, k, lambda mask0, p, q: _own_tree(x, 0, p, q))  # the bug: mask_indptr[r] never added


def _strict_ancestors(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return _mask(x, k, lambda m, p, q: _own_tree(x, m, p, q) & ~torch.eye(q, dtype=torch.bool))


def _level_mask(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    def read(mask0: int, prefix: int, q_len: int) -> torch.Tensor:
        depth = _own_tree(x, mask0, prefix, q_len).sum(-1)
        return depth[None, :] <= depth[:, None]  # the bug: every draft at a depth up to one's own

    return _mask(x, k, read)


def _rope_zeroed(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    q = k.q.clone()
    q[..., HEAD_DIM_V:] = 0
    return dataclasses.replace(k, q=q)


def _natural_log_scale(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    """The kernel folds log2(e) into its scale and runs exp2: this undoes the fold (exp2 of plain scores)."""
    return dataclasses.replace(k, sm_scale=k.sm_scale * math.log(2.0))


def _rope_first(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    q = torch.cat([k.q[..., HEAD_DIM_V:], k.q[..., :HEAD_DIM_V]], dim=-1).contiguous()
    return dataclasses.replace(k, q=q)


def _scale(value: float) -> KernelEdit:
    return lambda x, k: dataclasses.replace(k, sm_scale=value)


def _other_heads(x: VerifyInputs, k: KernelInputs) -> KernelInputs:
    return dataclasses.replace(k, q=k.q.roll(-(k.heads // 2), dims=1).contiguous())


def _written_head_major(out: torch.Tensor) -> torch.Tensor:
    """What the caller reads as (T, H) when the kernel wrote (H, T)."""
    total, heads, dim = out.shape
    return out.permute(1, 0, 2).reshape(total, heads, dim)


EMU_MISTAKES: dict[str, tuple[KernelEdit | None, OutputEdit | None]] = {
    "draft-missing": (_kv_indices_only, None),
    "mask-stride": (_stride_prefix, None),
    "causal-mask": (_causal, None),
    "mask-transposed": (_column_major, None),
    "rope-latent-swapped": (_rope_first, None),
    "scale-576": (_scale(SCALE_576), None),
    "scale-no-mscale": (_scale(SCALE_192), None),
    "wrong-heads": (_other_heads, None),
    "kv-off-by-one": (_slot_plus_one, None),
    "draft-kv-slot": (_draft_without_offset, None),
    "output-transposed": (None, _written_head_major),
    "drafts-twice": (_drafts_twice, None),
    "prefix-truncated": (_last_prefix_keys, None),
    "prefix-other-request": (_prefix_without_offset, None),
    "mask-other-request": (_mask_without_offset, None),
    "diagonal-missing": (_strict_ancestors, None),
    "siblings-visible": (_level_mask, None),
    "rope-dropped": (_rope_zeroed, None),
    "exp2-no-log2e": (_natural_log_scale, None),
}


# The hypothesis variant an adapter mistake reproduces, where it is not the first one.
EMU_VARIANTS = {"draft-missing": "kv_indices-as-key-list"}


def mutant_names(emu: bool = True) -> list[str]:
    names = [REFERENCE_PREFIX + h.name for h in HYPOTHESES]
    if emu:
        names += [EMU_PREFIX + h.name for h in HYPOTHESES if h.name in EMU_MISTAKES]
    return names


def get_mutant(name: str) -> Backend:
    """`mutant:<hypothesis>` or `mutant-emu:<hypothesis>`; KeyError naming the known ones otherwise."""
    if name.startswith(REFERENCE_PREFIX) and name[len(REFERENCE_PREFIX) :] in {h.name for h in HYPOTHESES}:
        return ReferenceMutant(name[len(REFERENCE_PREFIX) :])
    if name.startswith(EMU_PREFIX) and name[len(EMU_PREFIX) :] in EMU_MISTAKES:
        hypothesis = name[len(EMU_PREFIX) :]
        return EmuMutant(hypothesis, *EMU_MISTAKES[hypothesis])
    raise KeyError(f"unknown mutant {name!r}; known: {', '.join(mutant_names())}")


MUTANT_FAMILIES: Families = {REFERENCE_PREFIX: get_mutant, EMU_PREFIX: get_mutant}
"""`mutant:<hypothesis>` and `mutant-emu:<hypothesis>`: the Session serves these names to every face."""

"""The classic mistakes of a verify-attention port, each as "what the output would be under it".

Each hypothesis is a named, documented edit of the correct attention plan (`attention.correct_plan`) or of
the correct output, with one or more variants where a mistake shows up differently depending on how the
kernel consumes its inputs (the best-matching variant is what the ranking reports). Everything here is
pure: inputs in, predictions out. `ddbench.explain.mutants` turns each one into a deliberately wrong
backend, so `ddbench selftest` can prove that the suite catches it and that `explain` names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ddbench.explain.attention import (
    AttentionPlan,
    Prediction,
    RequestPlan,
    correct_plan,
    evaluate,
    read_draft_mask,
)
from ddbench.inputs.layout import VerifyInputs
from ddbench.mla import HEAD_DIM_QK, HEAD_DIM_V, ROPE_DIM

SCALE_576 = HEAD_DIM_QK**-0.5  # 1/sqrt(576): the absorbed width, a classic wrong scale
SCALE_192 = 192**-0.5  # qk_head_dim^-0.5 without YaRN's mscale^2
TRUNCATED_PREFIX_KEYS = (2048, 512, 1024, 4096)  # prefix windows a port keeps (tile or split sizes)
SPLIT_KEYS = (512, 256, 1024, 2048)  # split-KV chunks tried for an LSE-less combine (first: the mutant's)
ROW_EXPONENT_BITS = 9  # significant bits a row keeps under its shared exponent (block floating point)


class NotApplicable(Exception):
    """A variant that cannot be computed on these inputs (e.g. it would read outside the pool)."""


@dataclass(frozen=True)
class Context:
    """What a prediction may use: the inputs, the correct plan and output, and (rarely) the candidate."""

    inputs: VerifyInputs
    plan: AttentionPlan
    correct: Prediction
    candidate: torch.Tensor | None = None


@dataclass(frozen=True)
class Variant:
    name: str
    how: str  # what exactly is computed, in one phrase
    predict: Callable[[Context], Prediction]
    uses_candidate: bool = False  # fitted to the candidate (e.g. which heads it holds)


@dataclass(frozen=True)
class Hypothesis:
    name: str  # stable key: JSON, `mutant:<name>`, `selftest --mutant <name>`
    title: str  # what the user reads
    why: str  # how a real port gets there
    variants: tuple[Variant, ...]


def _planned(edit: Callable[[VerifyInputs, AttentionPlan], AttentionPlan]) -> Callable[[Context], Prediction]:
    return lambda ctx: evaluate(edit(ctx.inputs, ctx.plan))


def _ones(rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
    return torch.ones(rows, cols, dtype=torch.bool, device=like.device)


def _prefix_of(req: RequestPlan) -> int:
    return int((~req.draft_keys).sum())


def _tree_of(req: RequestPlan) -> torch.Tensor:
    """The request's correct (q_len, q_len) draft block."""
    return req.visible[:, _prefix_of(req) :]


def _only_keys(req: RequestPlan, keys: torch.Tensor | slice) -> RequestPlan:
    """The request with only these of its keys (an index tensor or a slice), visibility kept with them."""
    return RequestPlan(req.q0, req.q1, req.key_slots[keys], req.visible[:, keys], req.draft_keys[keys])


def _with_draft_block(
    x: VerifyInputs, plan: AttentionPlan, block: Callable[[int, RequestPlan], torch.Tensor]
) -> AttentionPlan:
    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix, q_len = _prefix_of(req), req.q1 - req.q0
        visible = torch.cat([_ones(q_len, prefix, req.visible), block(r, req)], dim=1)
        return RequestPlan(req.q0, req.q1, req.key_slots, visible, req.draft_keys)

    return plan.with_requests(edit)


# --- which keys ---------------------------------------------------------------------------------------------


def _prefix_only(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix, q_len = _prefix_of(req), req.q1 - req.q0
        slots = req.key_slots[:prefix]
        return RequestPlan(req.q0, req.q1, slots, _ones(q_len, prefix, slots), req.draft_keys[:prefix])

    return plan.with_requests(edit)


def _prefix_as_key_list(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    """kv_indices taken as the whole key list: the kernel masks its LAST q_len entries with the tree mask."""

    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix, q_len = _prefix_of(req), req.q1 - req.q0
        if q_len == 0:
            return req
        slots = req.key_slots[:prefix]
        start = prefix - q_len  # the kernel's idea of the prefix length; negative when prefix < q_len
        key = torch.arange(prefix, device=slots.device)
        column = (key - start).clamp(0, q_len - 1)
        visible = (key[None, :] < start) | _tree_of(req)[:, column]
        return RequestPlan(req.q0, req.q1, slots, visible, key >= start)

    return plan.with_requests(edit)


def _slot_plus_one(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    rows = plan.pool.shape[0]
    for req in plan.requests:
        if bool((req.key_slots[~req.draft_keys] + 1 >= rows).any()):
            raise NotApplicable(
                f"a prefix key is the pool's last row ({rows - 1}): slot + 1 is outside the pool"
            )

    def edit(r: int, req: RequestPlan) -> RequestPlan:
        slots = torch.where(req.draft_keys, req.key_slots, req.key_slots + 1)
        return RequestPlan(req.q0, req.q1, slots, req.visible, req.draft_keys)

    return plan.with_requests(edit)


def _draft_slots_without_request_offset(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    loc = x.out_cache_loc.long()

    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix, q_len = _prefix_of(req), req.q1 - req.q0
        local = torch.arange(q_len, device=loc.device).clamp(max=loc.numel() - 1)
        slots = torch.cat([req.key_slots[:prefix], loc[local]])
        return RequestPlan(req.q0, req.q1, slots, req.visible, req.draft_keys)

    return plan.with_requests(edit)


def _drafts_twice(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix, q_len = _prefix_of(req), req.q1 - req.q0
        drafts = req.key_slots[prefix:]
        slots = torch.cat([req.key_slots[:prefix], drafts, drafts])
        visible = torch.cat([_ones(q_len, prefix + q_len, drafts), _tree_of(req)], dim=1)
        draft = torch.cat([req.draft_keys, req.draft_keys[prefix:]])
        return RequestPlan(req.q0, req.q1, slots, visible, draft)

    return plan.with_requests(edit)


def _prefix_window(first: bool, keys: int) -> Callable[[VerifyInputs, AttentionPlan], AttentionPlan]:
    """Only the first (or last) `keys` prefix keys of each request attended, the draft keys as they are."""

    def plan_edit(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
        def edit(r: int, req: RequestPlan) -> RequestPlan:
            prefix = _prefix_of(req)
            if prefix <= keys:
                return req
            window = torch.arange(keys) if first else torch.arange(prefix - keys, prefix)
            kept = torch.cat([window, torch.arange(prefix, req.key_slots.numel())]).to(req.key_slots.device)
            return _only_keys(req, kept)

        return plan.with_requests(edit)

    return plan_edit


def _prefix_without_request_offset(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    """Request r reads kv_indices[0 : its prefix length]: kv_indptr[r] never added (request 0's keys)."""
    indices = x.kv_indices.long()

    def edit(r: int, req: RequestPlan) -> RequestPlan:
        prefix = _prefix_of(req)
        slots = torch.cat([indices[:prefix], req.key_slots[prefix:]])
        return RequestPlan(req.q0, req.q1, slots, req.visible, req.draft_keys)

    return plan.with_requests(edit)


# --- which mask ---------------------------------------------------------------------------------------------


def _stride_prefix(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    return _with_draft_block(x, plan, lambda r, req: read_draft_mask(x, r, _prefix_of(req), _prefix_of(req)))


def _causal(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    return _with_draft_block(
        x, plan, lambda r, req: _ones(req.q1 - req.q0, req.q1 - req.q0, req.visible).tril()
    )


def _transposed(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    return _with_draft_block(x, plan, lambda r, req: _tree_of(req).transpose(0, 1))


def _mask_without_request_offset(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    """Every request's tree mask read from mask_indptr[0] with its own geometry (request 0's bits)."""
    return _with_draft_block(
        x, plan, lambda r, req: read_draft_mask(x, r, _prefix_of(req) + req.q1 - req.q0, _prefix_of(req), 0)
    )


def _diagonal_missing(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    def block(r: int, req: RequestPlan) -> torch.Tensor:
        tree = _tree_of(req)
        return tree & ~torch.eye(tree.shape[0], dtype=torch.bool, device=tree.device)

    return _with_draft_block(x, plan, block)


def _depth_causal(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    """Draft i sees every draft no deeper than itself: the tree flattened into levels, siblings visible."""

    def block(r: int, req: RequestPlan) -> torch.Tensor:
        depth = _tree_of(req).sum(-1)  # ancestors and itself
        return depth[None, :] <= depth[:, None]

    return _with_draft_block(x, plan, block)


# --- query, scale, values -----------------------------------------------------------------------------------


def _rope_first(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    q = plan.q
    return plan.replace(q=torch.cat([q[..., HEAD_DIM_V:], q[..., :HEAD_DIM_V]], dim=-1))


def _scale(value: float) -> Callable[[VerifyInputs, AttentionPlan], AttentionPlan]:
    return lambda x, plan: plan.replace(sm_scale=value)


def _v_last_columns(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    return plan.replace(v_columns=(ROPE_DIM, HEAD_DIM_QK))


def _rope_dropped(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    q = plan.q.clone()
    q[..., HEAD_DIM_V:] = 0
    return plan.replace(q=q)


def _exp2_without_log2e(x: VerifyInputs, plan: AttentionPlan) -> AttentionPlan:
    """exp2(s) for exp(s): the scores scaled by ln 2 (log2(e) was never folded into the scale)."""
    return plan.replace(sm_scale=plan.sm_scale * math.log(2.0))


def _key_chunk(start: int, end: int) -> Callable[[int, RequestPlan], RequestPlan]:
    """A request edit keeping only its keys [start, end)."""
    return lambda r, req: _only_keys(req, slice(start, end))


def _splits_averaged(keys: int) -> Callable[[Context], Prediction]:
    """Split-KV over chunks of `keys` keys, each chunk's softmax output right, the chunks averaged (each
    row over the chunks where it sees a key) instead of weighted by their log-sum-exp."""

    def predict(ctx: Context) -> Prediction:
        plan = ctx.plan
        longest = max((req.key_slots.numel() for req in plan.requests), default=0)
        total = torch.zeros_like(ctx.correct.output)
        count = torch.zeros(ctx.correct.output.shape[:2], dtype=total.dtype, device=total.device)
        for start in range(0, longest, keys):
            chunk = _key_chunk(start, start + keys)
            part = evaluate(plan.with_requests(chunk))
            seen = ~part.free
            total += torch.where(seen[..., None], part.output, torch.zeros_like(part.output))
            count += seen.to(count.dtype)
        out = total / count.clamp(min=1)[..., None]
        return Prediction(out, ctx.correct.free, ctx.correct.tree_mass)

    return predict


# --- edits of the output ------------------------------------------------------------------------------------


def heads_rotation(heads: int) -> int:
    """The head offset the reference mutant uses: half the local heads (another rank's block, wrapped)."""
    return heads // 2


def _rotated_heads(ctx: Context) -> Prediction:
    heads = ctx.correct.output.shape[1]
    index = (torch.arange(heads, device=ctx.correct.output.device) + heads_rotation(heads)) % heads
    return ctx.correct.permuted(heads=index)


def _fitted_heads(ctx: Context) -> Prediction:
    """Each output head taken to be the correct head it resembles most (rows of NaN resemble nothing)."""
    if ctx.candidate is None:
        return _rotated_heads(ctx)
    c = ctx.candidate.to(torch.float64).cpu()
    ref = ctx.correct.output.to(torch.float64).cpu()
    heads = c.shape[1]
    a = c.transpose(0, 1).reshape(heads, -1).nan_to_num(0.0, 0.0, 0.0)
    b = ref.transpose(0, 1).reshape(heads, -1).nan_to_num(0.0, 0.0, 0.0)
    distance = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    index = distance.argmin(dim=1).to(ctx.correct.output.device)
    return ctx.correct.permuted(heads=index)


def _tokens_heads_transposed(ctx: Context) -> Prediction:
    """The kernel wrote row h*T + t for (t, h); the buffer is read as (T, H): position p holds row p."""
    total, heads = ctx.correct.output.shape[:2]
    p = torch.arange(total * heads, device=ctx.correct.output.device)
    t, h = p % total, p // total  # position p = h*T + t holds O[t, h]
    return ctx.correct.permuted(rows=t * heads + h)


def _row_shared_exponent(ctx: Context) -> Prediction:
    """Each row on the grid 2^(e - ROW_EXPONENT_BITS + 1), 2^e <= its largest |element|: one exponent per row,
    as a block-floating-point store of the output or the split parts would leave it."""
    out = ctx.correct.output
    largest = out.abs().amax(-1, keepdim=True).nan_to_num(0.0)
    step = torch.exp2(
        torch.floor(torch.log2(largest.clamp(min=torch.finfo(out.dtype).tiny))) - ROW_EXPONENT_BITS + 1
    )
    gridded = torch.where(largest > 0, (out / step).round() * step, out)
    return Prediction(gridded, ctx.correct.free, ctx.correct.tree_mass)


HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis(
        "draft-missing",
        "draft tokens missing (prefix-only attention)",
        "the draft tokens are taken to be in kv_indices; they are not (kv_indptr is prefix-only)",
        (
            Variant("prefix-only", "every row attends its request's prefix only", _planned(_prefix_only)),
            Variant(
                "kv_indices-as-key-list",
                "kv_indices as the whole key list, its last q_len entries under the tree mask",
                _planned(_prefix_as_key_list),
            ),
        ),
    ),
    Hypothesis(
        "mask-stride",
        "mask row stride prefix instead of prefix + q_len",
        "custom_mask rows are prefix + q_len long (prefix columns allocated but skipped)",
        (
            Variant(
                "stride-prefix", "row i read at mask_indptr + i*prefix + prefix", _planned(_stride_prefix)
            ),
        ),
    ),
    Hypothesis(
        "causal-mask",
        "causal mask instead of the tree mask",
        "is_causal=True taken as the whole story; the tree is not a chain",
        (Variant("causal", "draft i sees drafts 0..i", _planned(_causal)),),
    ),
    Hypothesis(
        "mask-transposed",
        "tree mask transposed (descendants instead of ancestors)",
        "the mask read column-major, or [i, j] taken as 'j sees i'",
        (Variant("descendants", "draft i sees itself and its descendants", _planned(_transposed)),),
    ),
    Hypothesis(
        "rope-latent-swapped",
        "query read as [rope || latent] (order swapped)",
        "q assembled or split as [q_pe, q_nope] while the pool rows are [latent || rope]",
        (Variant("rope-first", "q rotated by 64 columns against unchanged keys", _planned(_rope_first)),),
    ),
    Hypothesis(
        "scale-576",
        "wrong sm_scale: 1/sqrt(576)",
        "the softmax scale taken from the absorbed width",
        (Variant("1/sqrt(576)", f"sm_scale = {SCALE_576:.6f}", _planned(_scale(SCALE_576))),),
    ),
    Hypothesis(
        "scale-no-mscale",
        "wrong sm_scale: 192^-0.5 without YaRN's mscale²",
        "qk_head_dim^-0.5 without the YaRN factor",
        (Variant("192^-0.5", f"sm_scale = {SCALE_192:.6f}", _planned(_scale(SCALE_192))),),
    ),
    Hypothesis(
        "v-columns",
        "V taken from the wrong 512 columns",
        "V = columns 64..576 of the pool row instead of the latent 0..512",
        (Variant("last-512", "V = K[:, 64:576]", _planned(_v_last_columns)),),
    ),
    Hypothesis(
        "wrong-heads",
        "the heads of another TP rank (head index mapped wrong)",
        "a head offset (rank * local heads) applied to an already local tensor, wrapped or permuted",
        (
            Variant(
                "fitted",
                "each output head is some other correct head (mapping fitted to the candidate)",
                _fitted_heads,
                uses_candidate=True,
            ),
        ),
    ),
    Hypothesis(
        "kv-off-by-one",
        "kv_indices off by one (slot + 1)",
        "a 1-based slot, or an index advanced one step too early: the neighbouring pool row is read",
        (Variant("slot+1", "every prefix key read from pool row slot + 1", _planned(_slot_plus_one)),),
    ),
    Hypothesis(
        "draft-kv-slot",
        "draft KV read from the pool slot of another token",
        "out_cache_loc indexed without the request's qo_indptr offset",
        (
            Variant(
                "no-request-offset",
                "draft j of every request reads out_cache_loc[j] (request 0's drafts)",
                _planned(_draft_slots_without_request_offset),
            ),
        ),
    ),
    Hypothesis(
        "output-transposed",
        "output token/head order transposed",
        "the kernel writes (H, T, 512); the caller reads (T, H, 512)",
        (Variant("(H,T)-as-(T,H)", "output position p = h*T + t", _tokens_heads_transposed),),
    ),
    Hypothesis(
        "drafts-twice",
        "the prefix attending the draft tokens' KV twice",
        "kv_indices already holding the draft slots, which are then appended again (unmasked + masked)",
        (
            Variant(
                "prefix+drafts+drafts",
                "keys: prefix, drafts unmasked, drafts under the tree mask",
                _planned(_drafts_twice),
            ),
        ),
    ),
    Hypothesis(
        "prefix-truncated",
        "only part of the prefix attended (its first or last N keys)",
        "a loop bound, window or split count that stops short of the whole prefix",
        tuple(
            Variant(
                f"{'first' if first else 'last'}-{keys}",
                f"only the {'first' if first else 'last'} {keys} prefix keys of each request",
                _planned(_prefix_window(first, keys)),
            )
            for keys in TRUNCATED_PREFIX_KEYS
            for first in (False, True)
        ),
    ),
    Hypothesis(
        "prefix-other-request",
        "prefix keys read without the request's kv_indptr offset",
        "kv_indices indexed without the request's kv_indptr offset",
        (
            Variant(
                "no-kv-offset",
                "request r reads kv_indices[0 : prefix_r]",
                _planned(_prefix_without_request_offset),
            ),
        ),
    ),
    Hypothesis(
        "mask-other-request",
        "tree mask read without the request's mask_indptr offset",
        "custom_mask indexed without the request's mask_indptr offset",
        (
            Variant(
                "no-mask-offset",
                "request r's mask rows read from mask_indptr[0] with its own row length",
                _planned(_mask_without_request_offset),
            ),
        ),
    ),
    Hypothesis(
        "diagonal-missing",
        "a draft token does not see itself",
        "the tree mask built from strict ancestors (i > j) instead of ancestors and self",
        (
            Variant(
                "strict-ancestors", "the tree mask with its diagonal cleared", _planned(_diagonal_missing)
            ),
        ),
    ),
    Hypothesis(
        "siblings-visible",
        "depth-causal mask: a draft sees every draft no deeper than itself",
        "the tree flattened into levels (a per-depth causal mask) instead of the ancestor mask",
        (
            Variant(
                "depth-causal", "draft i sees drafts j with depth(j) <= depth(i)", _planned(_depth_causal)
            ),
        ),
    ),
    Hypothesis(
        "rope-dropped",
        "scores from the 512 latent channels only (rope part dropped)",
        "q.k over the latent width; the 64 rope channels never multiplied",
        (Variant("latent-only", "q's 64 rope channels taken as 0", _planned(_rope_dropped)),),
    ),
    Hypothesis(
        "exp2-no-log2e",
        "exp2 without log2(e) folded into the scale",
        "the softmax done with exp2 (as fast kernels do) but the scale left as sm_scale",
        (Variant("exp2(s)", "scores multiplied by ln 2 before the softmax", _planned(_exp2_without_log2e)),),
    ),
    Hypothesis(
        "row-shared-exponent",
        "each output row kept to 9 bits under one shared exponent (small channels lose their precision)",
        "a block-floating-point store of the output or the split parts (one exponent per row, e.g. to halve "
        "the parts' bytes): exact for the row's largest channels, coarse for its many small ones",
        (
            Variant(
                f"{ROW_EXPONENT_BITS}-bit-row",
                f"each row rounded to steps of 2^-{ROW_EXPONENT_BITS - 1} of its leading power of two",
                _row_shared_exponent,
            ),
        ),
    ),
    Hypothesis(
        "splits-no-lse",
        "split-KV parts averaged without their log-sum-exp weights",
        "flash-decoding's combine written as a mean of the parts' outputs",
        tuple(
            Variant(
                f"mean-of-{keys}", f"chunks of {keys} keys, their outputs averaged", _splits_averaged(keys)
            )
            for keys in SPLIT_KEYS
        ),
    ),
)

BY_NAME: dict[str, Hypothesis] = {h.name: h for h in HYPOTHESES}


def find_hypothesis(name: str) -> Hypothesis:
    if name not in BY_NAME:
        raise KeyError(f"unknown hypothesis {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


def mistaken_output(inputs: VerifyInputs, hypothesis: str, context: Context | None = None) -> Prediction:
    """The output under `hypothesis`'s first variant (what its reference mutant writes)."""
    if context is None:
        plan = correct_plan(inputs)
        context = Context(inputs, plan, evaluate(plan))
    return find_hypothesis(hypothesis).variants[0].predict(context)

"""Greedy decoding of a batch of prompts, with tree speculation or without, the verify attention on a backend.

Each step drafts a tree per request (root = the last token, its KV not yet in the pool), runs the target
over every draft token with the backend under test doing each layer's verify call, accepts greedily along
the tree, keeps the accepted rows and frees the others. When a `teacher` backend is given, the same step
(same trees, same pool state) first runs with the teacher's attention, and the two logits are compared:
the teacher-forced figures. The prompts' KV comes from the float32 torch reference for every run, so the
runs start from the same pool and only the verify calls differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ddbench.backends.protocol import Backend, prepared
from ddbench.backends.reference import ReferenceBackend
from ddbench.generation.drafter import DraftTree, EagleBuild, NoisyTargetDrafter
from ddbench.generation.greedy_accept import Accepted
from ddbench.generation.kv_pool import PagedKvPool
from ddbench.generation.mla_model import BOS
from ddbench.generation.target import TargetModel
from ddbench.generation.verify_batch import VerifyBatch, build_batch
from ddbench.poison import poisoned_mask
from ddbench.trees import Tree

PREFILL_CHUNK = 256  # prompt tokens a prefill call takes (its mask grows with the square of the chunk)

Acceptor = Callable[[Sequence[DraftTree], Sequence[Sequence[int]]], list[Accepted]]


class AttentionFault(RuntimeError):
    """The backend's verify call raised, or left outputs unwritten or non-finite."""


@dataclass(frozen=True)
class Workload:
    """What every run of one case decodes."""

    prompt_lens: tuple[int, ...]
    new_tokens: int
    tree: dict  # the draft tree's spec (kind chain, ddtree or eagle)
    q_len: int  # its draft tokens, root included
    page_size: int
    drafter_noise: float
    seed: int

    @property
    def max_context(self) -> int:
        return max(self.prompt_lens) + self.new_tokens + self.q_len


@dataclass(frozen=True)
class TeacherError:
    """One verify step: the target's logits with the backend against the teacher's, over all draft rows."""

    max_abs: float
    mean_abs: float
    confident_flips: int  # rows whose argmax differs where the teacher's top-2 margin is at least tau


@dataclass
class DecodeRun:
    backend: str
    tokens: list[list[int]]  # generated tokens per request (the prompt not included)
    margins: list[list[float]]  # the top-2 logit margin of the row that chose each token
    accept_lengths: list[int] = field(default_factory=list)  # per verify step and request: tokens it gave
    teacher: list[TeacherError] = field(default_factory=list)
    steps: int = 0  # verify calls of the whole batch (each one call per layer)
    seconds: float = 0.0
    error: str | None = None

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


def prompts(workload: Workload, vocab: int, bos: int = BOS) -> list[list[int]]:
    """BOS, then seeded tokens (token IDs: there is no tokenizer)."""
    out = []
    for r, length in enumerate(workload.prompt_lens):
        g = torch.Generator().manual_seed(workload.seed * 7919 + r)
        out.append([bos, *torch.randint(1, vocab, (length - 1,), generator=g).tolist()])
    return out


def _pool(model: TargetModel, workload: Workload, device: torch.device) -> PagedKvPool:
    ps = workload.page_size
    rows = sum(workload.prompt_lens) + len(workload.prompt_lens) * (workload.new_tokens + workload.q_len)
    pages = -(-rows // ps) + 2 * len(workload.prompt_lens)  # a part-filled page at each end of a request
    return PagedKvPool(model.shape.layers, pages, ps, workload.seed, device, model.kv_dtype)


def _forward(model: TargetModel, pool: PagedKvPool, batch: VerifyBatch, backend: Backend) -> torch.Tensor:
    """The target's logits over the batch's draft tokens, each layer's verify call on `backend`."""

    def attend(layer: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        pool.write(layer, batch.out_cache_loc, kv)
        inputs = batch.inputs(pool, layer, q, kv, model.shape.sm_scale)
        try:
            out = prepared(backend, inputs)()
        except Exception as err:  # the backend's failure ends this run, with where it happened
            raise AttentionFault(f"layer {layer}: {type(err).__name__}: {err}") from None
        if not isinstance(out, torch.Tensor) or out.shape != inputs.o_extend.shape:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise AttentionFault(f"layer {layer}: returned {shape}, expected {tuple(inputs.o_extend.shape)}")
        unwritten = int(poisoned_mask(out).sum())
        nonfinite = int((~torch.isfinite(out)).sum()) - unwritten
        if unwritten or nonfinite:
            raise AttentionFault(f"layer {layer}: {unwritten} unwritten and {nonfinite} non-finite outputs")
        return out

    return model.forward(batch.tokens, batch.positions, attend)


def _prefill(model: TargetModel, pool: PagedKvPool, workload: Workload, tokens: list[list[int]]) -> None:
    """Every prompt but its last token into the pool, in chunks, with the float32 reference."""
    reference = ReferenceBackend()
    for r, prompt in enumerate(tokens):
        pool.add_request()
        done = 0
        while done < len(prompt) - 1:
            chunk = prompt[done : min(done + PREFILL_CHUNK, len(prompt) - 1)]
            draft = DraftTree(Tree(tuple(range(-1, len(chunk) - 1)), kind="chain"), tuple(chunk))
            batch = build_batch(pool, [r], [done], [draft], workload.max_context, workload.seed)
            _forward(model, pool, batch, reference)
            done += len(chunk)


def _margins(logits: torch.Tensor) -> list[float]:
    top = logits.topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def decode(
    model: TargetModel,
    workload: Workload,
    backend: Backend,
    accept: Acceptor,
    eagle_build: EagleBuild,
    device: torch.device,
    speculate: bool = True,
    teacher: Backend | None = None,
    tie_margin: float = 0.0,
) -> DecodeRun:
    """Generate `new_tokens` for every prompt; a backend's fault ends the run with `error` set."""
    start = time.perf_counter()
    run = DecodeRun(backend.name, [[] for _ in workload.prompt_lens], [[] for _ in workload.prompt_lens])
    pool = _pool(model, workload, device)
    tokens = prompts(workload, model.shape.vocab, model.bos)
    _prefill(model, pool, workload, tokens)
    drafter = NoisyTargetDrafter(model, pool, workload.drafter_noise, workload.seed, eagle_build)
    seq_lens = [len(p) - 1 for p in tokens]
    roots = [p[-1] for p in tokens]
    step = 0
    try:
        while active := [r for r, out in enumerate(run.tokens) if len(out) < workload.new_tokens]:
            drafts = [
                drafter.draft(workload.tree, r, seq_lens[r], roots[r], step)
                if speculate
                else DraftTree(Tree((-1,)), (roots[r],))
                for r in active
            ]
            batch = build_batch(
                pool,
                active,
                [seq_lens[r] for r in active],
                drafts,
                workload.max_context,
                workload.seed + step,
            )
            taught = _forward(model, pool, batch, teacher) if teacher is not None else None
            logits = _forward(model, pool, batch, backend)
            if taught is not None:
                run.teacher.append(_teacher_error(logits, taught, tie_margin))
            _commit(run, pool, batch, active, logits, accept, seq_lens, roots, workload.new_tokens)
            step += 1
            run.steps = step
    except AttentionFault as err:
        run.error = f"verify step {step}: {err}"
    run.seconds = time.perf_counter() - start
    return run


def _teacher_error(logits: torch.Tensor, taught: torch.Tensor, tie_margin: float) -> TeacherError:
    diff = (logits - taught).abs()
    margins = torch.tensor(_margins(taught))
    flips = (logits.argmax(-1) != taught.argmax(-1)).cpu() & (margins >= tie_margin)
    return TeacherError(float(diff.max()), float(diff.mean()), int(flips.sum()))


def _commit(
    run: DecodeRun,
    pool: PagedKvPool,
    batch: VerifyBatch,
    active: list[int],
    logits: torch.Tensor,
    accept: Acceptor,
    seq_lens: list[int],
    roots: list[int],
    new_tokens: int,
) -> None:
    """Accept greedily, keep the accepted rows, and append what each request emitted."""
    predicted = logits.argmax(-1).tolist()
    margins = _margins(logits)
    offsets = batch.qo_indptr.tolist()
    rows = [predicted[offsets[i] : offsets[i + 1]] for i in range(len(active))]
    paths = accept(batch.drafts, rows)
    for i, (r, path) in enumerate(zip(active, paths, strict=True)):
        draft = batch.drafts[i]
        emitted = [draft.tokens[n] for n in path[1:]] + [rows[i][path[-1]]]
        pool.keep(r, seq_lens[r], path)
        seq_lens[r] += len(path)
        roots[r] = emitted[-1]
        room = new_tokens - len(run.tokens[r])
        run.tokens[r].extend(emitted[:room])
        run.margins[r].extend([margins[offsets[i] + n] for n in path][:room])
        run.accept_lengths.append(len(path))
        if len(run.tokens[r]) >= new_tokens:
            pool.release(r)

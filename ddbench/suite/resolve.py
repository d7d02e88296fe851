"""Semantic checks and resolution of a raw case into a `Case` (pure; no I/O).

The schema says what a field may look like; this says whether the values make sense together.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from ddbench.errors import InputError, TreeSpecError
from ddbench.suite.bound_sets import expand_bound_sets
from ddbench.suite.budget import Budget, budget_from_json
from ddbench.suite.captures import CaptureInfo
from ddbench.suite.checkpoints import CheckpointInfo
from ddbench.suite.expand import RawCase
from ddbench.suite.generation import GENERATION_LIMITS, GENERATION_TREE_KINDS, GenerationSpec
from ddbench.suite.ids import case_id
from ddbench.suite.input_styles import INPUT_STYLES
from ddbench.suite.model import (
    LIMIT_NAMES,
    Case,
    InputStyle,
    Layout,
    ModelSpec,
    ParityBound,
    SglangBuffers,
)
from ddbench.suite.presets import find_preset, preset_names
from ddbench.trees import MAX_Q_LEN, build_tree, tree_q_len

DEFAULT_PARITY = (
    # The Triton kernel lands within ~1.9 row-scaled bf16 ULPs of an fp64 truth; a float32
    # reference is that truth to well under a ULP.
    ParityBound("triton", "reference", (("max_row_ulp", 3.0), ("mean_row_ulp", 0.5), ("rel_l2", 0.01))),
)
FIELD_DEFAULTS: dict[str, Any] = {
    "batch_size": 1,
    "prefix": 0,
    "page_size": 1,
    "dtype": "bfloat16",
    "seed": 0,
}


class _Checker:
    """Collects every problem of one case, each tied to the JSON path that caused it."""

    def __init__(self, raw: RawCase, file: str) -> None:
        self.raw, self.file = raw, file
        self.errors: list[InputError] = []

    def fail(self, field: str, reason: str) -> None:
        self.errors.append(InputError(reason, file=self.file, path=self.raw.origin(field)))

    def value(self, field: str) -> Any:
        return self.raw.fields.get(field, FIELD_DEFAULTS.get(field))


def _model(c: _Checker, checkpoint: CheckpointInfo | None = None) -> ModelSpec | None:
    spec = c.value("model")
    if checkpoint is not None:  # its heads and softmax scale, whatever preset the case (or suite) names
        if isinstance(spec, str) and find_preset(spec) is None:  # still a typo, not a silent no-op
            c.fail("model", f"unknown model preset {spec!r}; known presets: {', '.join(preset_names())}")
        return ModelSpec(name=checkpoint.model_type, heads=checkpoint.heads, sm_scale=checkpoint.sm_scale)
    if spec is None:
        c.fail(
            "model", "no model: name a preset (" + ", ".join(preset_names()) + ") or give heads and sm_scale"
        )
        return None
    if isinstance(spec, str):
        spec = {"preset": spec}
    preset = None
    if "preset" in spec:
        preset = find_preset(spec["preset"])
        if preset is None:
            known = ", ".join(preset_names())
            c.fail("model", f"unknown model preset {spec['preset']!r}; known presets: {known}")
            return None
    heads = spec.get("heads", preset.heads if preset else None)
    scale = spec.get("sm_scale", preset.sm_scale if preset else None)
    if heads is None or scale is None:
        c.fail("model", "a model without a preset needs both heads and sm_scale")
        return None
    name = preset.name if preset else "custom"
    if preset and (heads != preset.heads or scale != preset.sm_scale):
        name += "-custom"
    return ModelSpec(name=name, heads=int(heads), sm_scale=float(scale))


def _layout(c: _Checker, model: ModelSpec | None, checkpoint: CheckpointInfo | None = None) -> Layout:
    spec = c.value("layout") or {}
    layout = Layout(tp=spec.get("tp", 1), dp_attention=spec.get("dp_attention", 1))
    if layout.tp % layout.dp_attention:
        c.fail("layout", f"tp {layout.tp} is not divisible by dp_attention {layout.dp_attention}")
    elif checkpoint and checkpoint.heads % layout.attention_tp:
        c.fail(
            "layout",
            f"num_attention_heads {checkpoint.heads} of checkpoint {checkpoint.name!r} do not split over "
            f"attention TP {layout.attention_tp}",
        )
    elif model and model.heads % layout.attention_tp:
        c.fail(
            "layout",
            f"{model.heads} heads of {model.name} do not split over attention TP {layout.attention_tp}",
        )
    return layout


def _prefix_lens(c: _Checker, batch_size: int, seed: int) -> tuple[int, ...]:
    spec = c.value("prefix")
    if isinstance(spec, int):
        return (spec,) * batch_size
    if isinstance(spec, list):
        if len(spec) != batch_size:
            c.fail(
                "prefix", f"per-request prefix list has {len(spec)} entries but batch_size is {batch_size}"
            )
        return tuple(spec)
    lo, hi = spec["min"], spec["max"]
    if lo > hi:
        c.fail("prefix", f"prefix range min {lo} is above max {hi}")
        return (lo,) * batch_size
    rng = random.Random(f"prefix:{seed}")  # a seeded range: the same suite always draws the same lengths
    return tuple(rng.randint(lo, hi) for _ in range(batch_size))


def _one_tree(c: _Checker, spec: Any, seed: int, at: str) -> int:
    """q_len of one spec (0 after an error, recorded with its path under `at`)."""
    try:
        q_len = tree_q_len(spec)
        if q_len > MAX_Q_LEN:
            c.errors.append(
                InputError(
                    f"the tree has {q_len} nodes; the verify step supports at most {MAX_Q_LEN}",
                    file=c.file,
                    path=at,
                )
            )
            return 0
        if spec["kind"] in ("paths", "parents"):
            build_tree(spec, seed)  # explicit trees are checked in full: order, range, closure
    except TreeSpecError as err:
        c.errors.append(InputError(err.reason, file=c.file, path=at + (f".{err.path}" if err.path else "")))
        return 0
    return q_len


def _tree(c: _Checker, seed: int, batch_size: int) -> tuple[Any, tuple[int, ...]]:
    """The spec (one, or one per request) and each request's q_len."""
    spec = c.value("tree")
    at = c.raw.origin("tree")
    if spec is None:
        c.fail("tree", 'no tree: every case needs a tree spec (e.g. {"kind": "ddtree", "budget": 8})')
        return {}, ()
    if not isinstance(spec, list):
        return spec, (_one_tree(c, spec, seed, at),) * batch_size
    if len(spec) != batch_size:
        c.fail("tree", f"per-request tree list has {len(spec)} entries but batch_size is {batch_size}")
        return spec, ()
    q_lens = tuple(_one_tree(c, s, seed, f"{at}[{i}]") for i, s in enumerate(spec))
    if all(s == spec[0] for s in spec):  # the same tree for every request: the same workload as one spec
        return spec[0], q_lens
    return spec, q_lens


def _parity(c: _Checker, generation: bool = False) -> tuple[ParityBound, ...]:
    """Tensor-parity limits for a parity case; the logits limits for a generation case."""
    specs = c.value("parity")
    if specs is None:
        if generation:
            c.fail("parity", "a generation case needs parity bounds: who is judged against whom, on logits")
        return DEFAULT_PARITY
    specs = expand_bound_sets(specs)
    names, others = (GENERATION_LIMITS, LIMIT_NAMES) if generation else (LIMIT_NAMES, GENERATION_LIMITS)
    bounds = []
    for i, spec in enumerate(specs):
        limits = tuple((k, float(spec[k])) for k in names if k in spec)
        wrong = [k for k in (*others, *(("margin_row_ulp",) if generation else ())) if k in spec]
        if wrong:
            kind = (
                "a generation case" if generation else "a parity case (they judge a generation case's logits)"
            )
            c.fail("parity", f"bound {i}: {', '.join(wrong)} do not apply to {kind}")
        if any(not math.isfinite(value) for _, value in limits):
            c.fail("parity", f"bound {i}: every limit must be a finite number")
        if spec["candidate"] == spec["against"]:
            c.fail("parity", f"bound {i} compares {spec['candidate']!r} with itself")
        peer = spec.get("no_worse_than")
        if peer in (spec["candidate"], spec["against"]):
            c.fail("parity", f"bound {i}: no_worse_than must name a third backend, not {peer!r}")
        if not limits and not peer:
            c.fail(
                "parity",
                f"bound {i} ({spec['candidate']} vs {spec['against']}) sets no limit; "
                f"give at least one of {', '.join(names)}",
            )
        margin = float(spec.get("margin_row_ulp", 0.0))
        bounds.append(ParityBound(spec["candidate"], spec["against"], limits, peer, margin))
    return tuple(bounds)


def _generation(
    c: _Checker, prefix_lens: tuple[int, ...], checkpoint: CheckpointInfo | None = None
) -> GenerationSpec | None:
    """The spec of a generation case, and what it rules out: per-request trees, budgets, served buffers,
    and with a checkpoint, a size of its own."""
    spec = c.value("generation")
    if spec is None:
        return None
    spec = {k: v for k, v in spec.items() if k != "checkpoint"}
    if checkpoint is not None:
        at = c.raw.origin("generation")
        for name in ("hidden", "vocab"):
            if name in spec:
                reason = (
                    f"comes from checkpoint {checkpoint.name!r} ({getattr(checkpoint, name)}); leave it out"
                )
                c.errors.append(InputError(reason, file=c.file, path=f"{at}.{name}"))
        layers = spec.get("layers", checkpoint.layers)
        if layers > checkpoint.layers:
            c.errors.append(
                InputError(
                    f"is {layers}; checkpoint {checkpoint.name!r} has {checkpoint.layers} layers",
                    file=c.file,
                    path=f"{at}.layers",
                )
            )
        spec |= {
            "layers": min(layers, checkpoint.layers),
            "hidden": checkpoint.hidden,
            "vocab": checkpoint.vocab,
        }
    generation = GenerationSpec(**spec, checkpoint=checkpoint)
    for name in ("drafter_noise", "tie_margin", "min_accept_length"):
        if not math.isfinite(getattr(generation, name)):
            c.fail("generation", f"{name} must be a finite number")
    tree = c.value("tree")
    if isinstance(tree, list):
        c.fail("tree", "a generation case drafts one tree shape for every request; give one spec")
    elif isinstance(tree, dict) and tree.get("kind") not in GENERATION_TREE_KINDS:
        c.fail(
            "tree",
            f"a generation case drafts {', '.join(GENERATION_TREE_KINDS)} trees, not {tree.get('kind')!r}",
        )
    if prefix_lens and min(prefix_lens) < 2:
        c.fail("prefix", "a generation case's prefix is each prompt's length: at least 2 (BOS and one token)")
    for name in ("budget", "sglang_buffers"):
        if c.value(name) is not None:
            c.fail(name, f"a generation case is judged by its gates; {name} applies to parity cases")
    return generation


def _budget(c: _Checker) -> Budget | None:
    spec = c.value("budget")
    if spec is None:
        return None
    budget = budget_from_json(spec)
    if budget.timing.min_samples > budget.timing.max_samples:
        c.fail(
            "budget",
            f"timing.min_samples {budget.timing.min_samples} is above max_samples "
            f"{budget.timing.max_samples}",
        )
    for r in budget.ratios:
        if r.candidate == r.baseline:
            c.fail("budget", f"ratio {r.candidate}/{r.baseline} compares a backend with itself")
    _model_budgets(c, budget)
    return budget


def _model_budgets(c: _Checker, budget: Budget) -> None:
    """What the schema cannot say: one model budget per GPU, and limits that are numbers (NaN passes
    every bound the schema sets, and would make a limit that nothing ever exceeds)."""
    seen: set[str] = set()
    for m in budget.model:
        if m.gpu in seen:
            c.fail("budget", f"model: two budgets name gpu {m.gpu!r}; give one per GPU")
        seen.add(m.gpu)
        for name in ("max_modeled_regression", "max_modeled_cuda_over_triton"):
            value = getattr(m, name)
            if value is not None and not math.isfinite(value):
                c.fail("budget", f"model ({m.gpu}): {name} must be a finite number, got {value!r}")


def _inputs(c: _Checker) -> InputStyle:
    """A named style's fields, then those the suite sets beside it (the schema admits known names only)."""
    spec = dict(c.value("inputs") or {})
    style = INPUT_STYLES[spec.pop("style")] if "style" in spec else {}
    return InputStyle(**{**style, **spec})


def _sglang_buffers(c: _Checker, batch_size: int, prefix_lens: tuple[int, ...]) -> SglangBuffers | None:
    """The buffers as served; every prefix of the group (the case's, each replay's) within max_context."""
    spec = c.value("sglang_buffers")
    if spec is None:
        return None
    mode, max_context = spec["mode"], spec["max_context"]
    replays = spec.get("replay_prefix", [])
    if replays and mode != "cuda-graph":
        c.fail("sglang_buffers", "replay_prefix needs mode cuda-graph (eager calls are not replayed)")
    group = [prefix_lens]
    for k, replay in enumerate(replays):
        lens = tuple(replay) if isinstance(replay, list) else (replay,) * batch_size
        if len(lens) != batch_size:
            c.fail(
                "sglang_buffers", f"replay_prefix[{k}] has {len(lens)} entries but batch_size is {batch_size}"
            )
        group.append(lens)
    for k, lens in enumerate(group):
        if lens and max(lens) > max_context:
            which = "prefix" if k == 0 else f"replay_prefix[{k - 1}]"
            c.fail("sglang_buffers", f"{which} {max(lens)} is above max_context {max_context}")
    return SglangBuffers(mode, max_context, tuple(group) if mode == "cuda-graph" else (), 0)


def graph_replays(case: Case, label: str | None) -> tuple[Case, ...]:
    """A cuda-graph case's replays: one case per replay length, the same buffers' group."""
    buffers = case.sglang_buffers
    if buffers is None or not buffers.graph:
        return ()
    return tuple(
        case_id(
            dataclasses.replace(
                case, prefix_lens=lens, sglang_buffers=dataclasses.replace(buffers, replay=k), id=""
            ),
            label,
        )
        for k, lens in enumerate(buffers.group_prefixes[1:], start=1)
    )


def resolve_case(
    raw: RawCase, suite: str, file: str, checkpoint: CheckpointInfo | None = None
) -> tuple[tuple[Case, ...], list[InputError]]:
    """The case, and where it is a CUDA-graph group, its replays after it. `checkpoint`: the folder its
    generation spec names, already read (ddbench.suite.load)."""
    c = _Checker(raw, file)
    model = _model(c, checkpoint)
    layout = _layout(c, model, checkpoint)
    batch_size, seed = c.value("batch_size"), c.value("seed")
    prefix_lens = _prefix_lens(c, batch_size, seed)
    tree, q_lens = _tree(c, seed, batch_size)
    generation = _generation(c, prefix_lens, checkpoint)
    parity = _parity(c, generation is not None)
    budget = _budget(c)  # before the early return: every check reports, not just those before the first error
    buffers = _sglang_buffers(c, batch_size, prefix_lens)
    if c.errors or model is None:
        return (), c.errors
    case = Case(
        id="",
        suite=suite,
        model=model,
        layout=layout,
        batch_size=batch_size,
        prefix_lens=prefix_lens,
        tree=tree,
        q_len=max(q_lens),
        q_lens=q_lens,
        page_size=c.value("page_size"),
        dtype=c.value("dtype"),
        seed=seed,
        inputs=_inputs(c),
        parity=parity,
        budget=budget,
        backends=tuple(c.value("backends") or ()),
        tags=tuple(c.value("tags") or ()),
        description=c.value("description") or "",
        origin=raw.entry,
        sglang_buffers=buffers,
        generation=generation,
    )
    first = case_id(case, c.value("label"))
    return (first, *graph_replays(first, c.value("label"))), []


def resolve_capture_case(
    raw: RawCase, suite: str, file: str, info: CaptureInfo
) -> tuple[Case | None, list[InputError]]:
    """A replayed capture: its tensors define the workload; the suite gives bounds, backends, budget, tags."""
    c = _Checker(raw, file)
    parity = _parity(c)
    budget = _budget(c)
    if c.value("sglang_buffers") is not None:
        c.fail(
            "sglang_buffers",
            "a capture holds the buffers it was made with; sglang_buffers sizes generated ones",
        )
    if c.value("generation") is not None:
        c.fail("generation", "a capture is one verify call; a generation case decodes with a model")
    if c.errors:
        return None, c.errors
    tree = (
        {"kind": "parents", "parents": list(info.parents)} if info.parents else {"kind": "chain", "length": 1}
    )
    case = Case(
        id="",
        suite=suite,
        model=ModelSpec(name=info.model or "captured", heads=info.heads, sm_scale=info.sm_scale),
        layout=Layout(),
        batch_size=info.batch_size,
        prefix_lens=info.prefix_lens,
        tree=tree,
        q_len=info.q_len,
        q_lens=info.q_lens,
        page_size=info.page_size,
        dtype=c.value("dtype"),
        seed=0,
        inputs=InputStyle(),
        parity=parity,
        budget=budget,
        backends=tuple(c.value("backends") or ()),
        tags=tuple(c.value("tags") or ()),
        description=c.value("description") or f"replay of {info.ref.path}",
        origin=raw.entry,
        capture=info.ref,
    )
    label = c.value("label")
    return case_id(case, f"{label}.capture-{info.stem}" if label else f"capture-{info.stem}"), []

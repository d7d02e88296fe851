"""The resolved, immutable description of one case: what every later stage consumes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ddbench.suite.budget import Budget
from ddbench.suite.generation import GenerationSpec

LIMIT_NAMES = (
    "max_row_ulp", "mean_row_ulp", "p999_ulp", "max_ulp", "max_abs", "mean_abs", "rel_l2", "abs_gain",
    "max_channel_ulp",
)  # fmt: skip
ANY_BACKEND = "*"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    heads: int
    sm_scale: float


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp_attention: int = 1

    @property
    def attention_tp(self) -> int:
        """Ranks that split the heads: with DP-attention every attention group holds tp/dp ranks."""
        return self.tp // self.dp_attention


@dataclass(frozen=True)
class InputStyle:
    """How the synthetic tensors look: real models have spread scores, an attention sink and a peak on the
    recent tokens, latent channels of very different scales (a few outliers), a rope part of its own scale,
    and a large KV pool."""

    logit_spread: float = 2.5
    sink_logit: float = 4.0
    latent_scale: float = 1.0  # median scale of the 512 latent channels (keys and values)
    latent_spread: float = 0.4  # sigma of the channels' log-normal scales
    outlier_channels: int = 0  # latent channels `outlier_scale` times larger
    outlier_scale: float = 1.0
    rope_scale: float = 1.0  # scale of the 64 rope channels of the keys
    pool_rows: int = 0  # a pool of at least this many rows, the tokens spread over it (0: twice the tokens)
    local_window: int = 0  # the most recent prefix tokens (and the draft tokens) score higher: a local peak
    local_logit: float = 0.0  # the lift of the most recent prefix token, falling linearly over the window

    def to_json(self) -> dict[str, Any]:
        """The two original fields always, the others where they differ from the defaults: the workloads
        (and IDs) of cases written before them do not move."""
        default = InputStyle()
        out: dict[str, Any] = {"logit_spread": self.logit_spread, "sink_logit": self.sink_logit}
        for f in dataclasses.fields(self)[2:]:
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = value
        return out


@dataclass(frozen=True)
class ParityBound:
    """Limits on the candidate's error, measured against `against` (the side taken as truth)."""

    candidate: str
    against: str
    limits: tuple[tuple[str, float], ...]
    # Relative limit: the candidate's max_row_ulp against `against` may exceed this backend's by at most
    # `margin_row_ulp` (a kernel must be no worse than the kernel it replaces, whatever that one's error is).
    no_worse_than: str | None = None
    margin_row_ulp: float = 0.0

    def limit(self, name: str) -> float | None:
        return dict(self.limits).get(name)

    def applies_to(self, backend: str) -> bool:
        return backend != self.against and self.candidate in (backend, ANY_BACKEND)

    def to_json(self) -> dict[str, Any]:
        out = {"candidate": self.candidate, "against": self.against, **dict(self.limits)}
        if self.no_worse_than:
            out |= {"no_worse_than": self.no_worse_than, "margin_row_ulp": self.margin_row_ulp}
        return out


@dataclass(frozen=True)
class CaptureRef:
    """A replayed capture: the file, and the SHA-256 of its bytes (the workload a case ID stands for)."""

    path: str
    sha256: str


SGLANG_BUFFER_MODES = ("eager", "cuda-graph")


@dataclass(frozen=True)
class SglangBuffers:
    """The call's buffers as a live SGLang server passes them: kv_indices sized for `max_context` keys a
    request and the custom mask for that capacity, their tails past the lengths holding garbage. In
    `cuda-graph` mode the backends also prepare their launch once, at that capacity, and a CUDA-graph group
    of cases replays it: the group's first case (replay 0), then one case per replay length, each writing
    its call into the same buffers."""

    mode: str
    max_context: int
    group_prefixes: tuple[tuple[int, ...], ...] = ()  # cuda-graph: every call of the group, replay order
    replay: int = 0  # the call of the group this case is (0: the first, at which the launch is prepared)

    @property
    def graph(self) -> bool:
        return self.mode == "cuda-graph"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "max_context": self.max_context}
        if self.graph:
            out |= {"group_prefixes": [list(p) for p in self.group_prefixes], "replay": self.replay}
        return out


@dataclass(frozen=True)
class Case:
    id: str
    suite: str
    model: ModelSpec
    layout: Layout
    batch_size: int
    prefix_lens: tuple[int, ...]
    # One spec for every request, or a list of specs, one per request (ragged q_len).
    tree: dict[str, Any] | list[dict[str, Any]] = field(hash=False)
    q_len: int  # the longest request's draft tokens (SGLang's max_len_extend)
    page_size: int
    dtype: str
    seed: int
    inputs: InputStyle
    parity: tuple[ParityBound, ...]
    budget: Budget | None = None
    backends: tuple[str, ...] = ()  # run by default; empty: the backends the bounds name
    capture: CaptureRef | None = None  # inputs come from this file instead of the generator
    tags: tuple[str, ...] = ()
    description: str = ""
    origin: str = ""  # JSON path of the suite entry the case came from
    q_lens: tuple[int, ...] = ()  # draft tokens per request; () means q_len for every request
    sglang_buffers: SglangBuffers | None = None  # over-allocated buffers (and a replayed launch), as served
    generation: GenerationSpec | None = None  # an end-to-end case: decode with the model, judge the tokens

    def __post_init__(self) -> None:
        if not self.q_lens:
            object.__setattr__(self, "q_lens", (self.q_len,) * self.batch_size)

    @property
    def heads_per_rank(self) -> int:
        return self.model.heads // self.layout.attention_tp

    @property
    def graph_replayed(self) -> bool:
        """A case of a CUDA-graph group: its launch is prepared once, for the capacity, and replayed."""
        return self.sglang_buffers is not None and self.sglang_buffers.graph

    @property
    def total_q(self) -> int:
        return sum(self.q_lens)

    @property
    def ragged_q(self) -> bool:
        return len(set(self.q_lens)) > 1

    def tree_of(self, request: int) -> dict[str, Any]:
        """The tree spec of one request."""
        return self.tree[request] if isinstance(self.tree, list) else self.tree

    def workload(self) -> dict[str, Any]:
        """Everything that changes the computed tensors; its canonical JSON is hashed into the case ID.
        A replayed capture is its file's bytes."""
        if self.capture is not None:
            return {"capture_sha256": self.capture.sha256, "dtype": self.dtype}
        return self.shape()

    def shape(self) -> dict[str, Any]:
        """The workload's description (for a capture: what its tensors hold). `sglang_buffers` and
        `generation` only where set: the workloads (and IDs) of cases without them do not move."""
        buffers = {"sglang_buffers": self.sglang_buffers.to_json()} if self.sglang_buffers else {}
        if self.generation is not None:
            buffers["generation"] = self.generation.to_json()
        return buffers | {
            "model": {"name": self.model.name, "heads": self.model.heads, "sm_scale": self.model.sm_scale},
            "layout": {"tp": self.layout.tp, "dp_attention": self.layout.dp_attention},
            "heads_per_rank": self.heads_per_rank,
            "batch_size": self.batch_size,
            "prefix_lens": list(self.prefix_lens),
            "tree": self.tree,
            "page_size": self.page_size,
            "dtype": self.dtype,
            "seed": self.seed,
            "inputs": self.inputs.to_json(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "suite": self.suite,
            **self.shape(),
            "q_len": self.q_len,
            "q_lens": list(self.q_lens),
            "parity": [b.to_json() for b in self.parity],
            "budget": self.budget.to_json() if self.budget else None,
            "backends": list(self.backends),
            "tags": list(self.tags),
            "description": self.description,
            "capture": {"path": self.capture.path, "sha256": self.capture.sha256} if self.capture else None,
        }


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: str
    cases: tuple[Case, ...]

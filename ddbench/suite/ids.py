"""Stable case IDs: a readable part for people and `-k` filters, and a hash of the workload for machines."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ddbench.suite.model import Case
from ddbench.trees import tree_label

HASH_CHARS = 8


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def workload_digest(case: Case) -> str:
    """The full SHA-256 of the workload: what tells two workloads apart (the ID's 8 hex digits collide
    among ~10^5 cases; a 256-bit digest does not)."""
    return hashlib.sha256(canonical_json(case.workload()).encode()).hexdigest()


def workload_hash(case: Case) -> str:
    """The ID's short suffix: enough for people and filters, not for telling workloads apart."""
    return workload_digest(case)[:HASH_CHARS]


def _prefix_label(prefix_lens: tuple[int, ...]) -> str:
    if len(set(prefix_lens)) == 1:
        return f"p{prefix_lens[0]}"
    return f"p{min(prefix_lens)}-{max(prefix_lens)}"


def readable_id(case: Case) -> str:
    layout = f"tp{case.layout.tp}" + (f"dp{case.layout.dp_attention}" if case.layout.dp_attention > 1 else "")
    parts = [
        case.model.name,
        layout,
        f"h{case.heads_per_rank}",
        f"bs{case.batch_size}",
        _prefix_label(case.prefix_lens),
        tree_label(case.tree),
    ]
    if case.page_size != 1:
        parts.append(f"ps{case.page_size}")
    if case.generation is not None:  # `-k e2e` selects them
        parts.append(f"e2e{case.generation.new_tokens}")
    buffers = case.sglang_buffers
    if buffers is not None:  # `-k eager`, `-k graph` and `-k replay` select them
        parts.append(f"{'graph' if buffers.graph else 'eager'}{buffers.max_context}")
        if buffers.replay:
            parts.append(f"replay{buffers.replay}")
    return "-".join(parts)


def case_id(case: Case, label: str | None = None) -> Case:
    """`label.readable-hash`; a replayed capture is named by its label (capture-<file stem>) alone."""
    readable = readable_id(case)
    if case.capture is not None and label:
        readable = label
    elif label:
        readable = f"{label}.{readable}"
    return dataclasses.replace(case, id=f"{readable}-{workload_hash(case)}")

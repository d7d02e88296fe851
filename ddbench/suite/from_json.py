"""Rebuild a `Case` from the JSON a results file (or a saved-outputs file) recorded for it.

`ddbench explain` works after the fact, from files: it regenerates the case's inputs, so the recorded case
must describe the very workload that ran. The workload hash in the case ID is the proof: a rebuilt case
whose hash differs (edited file, other ddbench version) is refused instead of explaining other tensors.
"""

from __future__ import annotations

from typing import Any

from ddbench.errors import InputError
from ddbench.suite.budget import budget_from_json
from ddbench.suite.ids import HASH_CHARS, workload_hash
from ddbench.suite.model import (
    LIMIT_NAMES,
    CaptureRef,
    Case,
    InputStyle,
    Layout,
    ModelSpec,
    ParityBound,
    SglangBuffers,
)


def bound_from_json(spec: dict[str, Any]) -> ParityBound:
    """A bound as a suite (or a bound set) writes it."""
    limits = tuple((k, float(spec[k])) for k in LIMIT_NAMES if k in spec)
    return ParityBound(
        spec["candidate"],
        spec["against"],
        limits,
        spec.get("no_worse_than"),
        float(spec.get("margin_row_ulp", 0.0)),
    )


def _buffers(spec: dict[str, Any] | None) -> SglangBuffers | None:
    if spec is None:
        return None
    return SglangBuffers(
        spec["mode"],
        int(spec["max_context"]),
        tuple(tuple(int(n) for n in p) for p in spec.get("group_prefixes", ())),
        int(spec.get("replay", 0)),
    )


def case_from_json(document: dict[str, Any], source: str | None = None) -> Case:
    """Inverse of `Case.to_json`; raises InputError when a field is missing or the hash does not match."""
    try:
        model, layout, style = document["model"], document["layout"], document["inputs"]
        case = Case(
            id=document["id"],
            suite=document.get("suite", ""),
            model=ModelSpec(model["name"], int(model["heads"]), float(model["sm_scale"])),
            layout=Layout(int(layout["tp"]), int(layout["dp_attention"])),
            batch_size=int(document["batch_size"]),
            prefix_lens=tuple(int(p) for p in document["prefix_lens"]),
            tree=document["tree"],
            q_len=int(document["q_len"]),
            page_size=int(document["page_size"]),
            dtype=document["dtype"],
            seed=int(document["seed"]),
            inputs=InputStyle(**style),
            parity=tuple(bound_from_json(b) for b in document.get("parity", [])),
            budget=budget_from_json(document["budget"]) if document.get("budget") else None,
            backends=tuple(document.get("backends", ())),
            capture=CaptureRef(**document["capture"]) if document.get("capture") else None,
            tags=tuple(document.get("tags", [])),
            description=document.get("description", ""),
            q_lens=tuple(int(n) for n in document.get("q_lens", ())),
            sglang_buffers=_buffers(document.get("sglang_buffers")),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"recorded case is incomplete: {type(err).__name__}: {err}", file=source) from None
    recorded = case.id.rsplit("-", 1)[-1]
    actual = workload_hash(case)
    if len(recorded) != HASH_CHARS or recorded != actual:
        raise InputError(
            f"case {case.id}: the recorded workload hashes to {actual}, not {recorded}; "
            "the inputs cannot be regenerated faithfully",
            file=source,
        )
    return case

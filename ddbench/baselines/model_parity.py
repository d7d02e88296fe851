"""Whether a case's modeled figures may become a model baseline: only when the kernel they count is right.

Counters are exact, so there is no noise to refuse; but counting a wrong kernel would bless it. A case
qualifies when a normal run judged it (one results entry, as `ddbench run --json` writes or a Session result
serialises to) with no setup error, no failed or errored bound, and at least one passing bound whose
candidate is the kernel (`cuda` on a GPU, `cuda-emu` on the CPU). Pure: it reads JSON-shaped entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddbench.errors import InputError
from ddbench.metrics import PASS, SKIPPED

KERNEL_BACKENDS = ("cuda", "cuda-emu")


def kernel_parity_refusals(entry: Mapping[str, Any]) -> list[str]:
    """Why this case result does not vouch for the kernel (empty: it does)."""
    out = []
    if entry.get("error"):
        out.append(f"inputs: {entry['error']}")
    pairs = entry.get("pairs") or []
    for p in pairs:
        if p.get("status") not in (PASS, SKIPPED):
            reasons = "; ".join(p.get("reasons") or [])
            out.append(f"parity {p.get('candidate')} vs {p.get('against')}: {p.get('status')} ({reasons})")
    if not any(p.get("status") == PASS and p.get("candidate") in KERNEL_BACKENDS for p in pairs):
        out.append("the kernel's parity was not judged (no passing bound names cuda or cuda-emu)")
    return out


def refusals_from_results(
    case_ids: Sequence[str], document: Mapping[str, Any], source: str
) -> dict[str, list[str]]:
    """Case ID -> refusals, from a results document a run wrote earlier; a case it lacks is refused."""
    cases = document.get("cases")
    if not isinstance(cases, list):
        raise InputError("must hold a list of case results", file=source, path="cases")
    by_id = {c.get("id"): c for c in cases if isinstance(c, Mapping)}
    return {
        case_id: kernel_parity_refusals(by_id[case_id])
        if case_id in by_id
        else [f"not in {source}: its parity was never judged"]
        for case_id in case_ids
    }

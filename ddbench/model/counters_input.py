"""The emulation's counters document (see docs/model.md), checked and typed (pure).

Only the fields the model reads are required; a missing or mistyped one is an InputError naming its JSON path,
so counters from a newer emulation or a hand-written fixture fail with a reason, not a KeyError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddbench.errors import InputError
from ddbench.kernel.counters import INSTRUCTION_KINDS

PHASE_FIELDS = ("mma", "shared_wavefronts", "global_bytes", "shuffles", "warp_instructions")
SECTOR_BYTES = 32


@dataclass(frozen=True)
class Phase:
    mma: int
    shared_wavefronts: int
    global_bytes: int
    shuffles: int
    warp_instructions: int
    cluster_bytes: int = 0  # read from other CTAs' shared memory (0 in documents from before clusters)
    cluster_barrier: bool = False  # the phase ends at a cluster barrier (sync_cluster, or a cluster_wait)
    atomics: int = 0  # global atomics (warp instructions; 0 in documents from before the final merge)
    # the phase ends at a cluster_arrive: the barrier's latency runs on behind the phases up to its wait
    cluster_arrive: bool = False


@dataclass(frozen=True)
class CtaShape:
    count: int
    phases: tuple[Phase, ...]
    global_bytes: int
    # The most bytes these CTAs had in flight at one cp.async wait (what their pipeline holds), or None: the
    # shape lists no wait with bytes in flight (a derived document, one from before per-shape waits, or CTAs
    # without copies), and the kernel's figure serves.
    bytes_in_flight: float | None = None
    # warp instructions by call site and kind (ddbench/model/sass_count.py); empty in older documents
    sites: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelCounters:
    name: str
    threads_per_cta: int
    ctas: int
    dynamic_smem_bytes: int
    sectors: int
    unique_sectors: int
    bytes_in_flight_at_wait: tuple[int, ...]
    shared_instructions: int
    shared_wavefronts: int
    bank_conflicts: int
    shapes: tuple[CtaShape, ...]
    totals: Mapping[str, Any]

    @property
    def l2_bytes(self) -> int:
        return self.sectors * SECTOR_BYTES

    @property
    def unique_bytes(self) -> int:
        return self.unique_sectors * SECTOR_BYTES

    @property
    def wavefronts_per_shared_instruction(self) -> float | None:
        return self.shared_wavefronts / self.shared_instructions if self.shared_instructions else None


def _get(doc: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(doc, Mapping) or key not in doc:
        raise InputError(f"missing field {key!r}", path=path)
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InputError(f"{key!r} must be {getattr(kind, '__name__', 'a number')}", path=f"{path}.{key}")
    return value


def _count(doc: Any, key: str, path: str) -> int:
    value = _get(doc, key, path, int)
    if value < 0:
        raise InputError(f"{key!r} must be >= 0, not {value}", path=f"{path}.{key}")
    return value


def _sum_counts(doc: Any, path: str) -> int:
    if not isinstance(doc, Mapping):
        raise InputError("must be an object of counts", path=path)
    return sum(_count(doc, key, path) for key in doc)


def _instruction_count(instructions: Any, kind: str, path: str) -> int:
    """A kind's count in a phase's instructions, 0 where a document from before it lacks it."""
    n = instructions.get(kind, 0) if isinstance(instructions, Mapping) else 0
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InputError(f"'{kind}' must be an integer >= 0", path=f"{path}.instructions.{kind}")
    return n


def _phase(doc: Any, path: str) -> Phase:
    cluster_bytes = _count(doc, "cluster_bytes", path) if "cluster_bytes" in doc else 0
    instructions = doc.get("instructions", {})
    syncs = _instruction_count(instructions, "sync_cluster", path)
    atomics = _instruction_count(instructions, "atom_global", path)
    arrives = _count(doc, "cluster_arrives", path) if "cluster_arrives" in doc else 0
    fields = (_count(doc, f, path) for f in PHASE_FIELDS)
    return Phase(*fields, cluster_bytes, syncs > 0, atomics, arrives > 0)


def _shape_in_flight(shape: Any, path: str) -> float | None:
    waits = shape.get("cp_async_waits") if isinstance(shape, Mapping) else None
    if waits is None:
        return None
    if isinstance(waits, (str, bytes)) or not isinstance(waits, Sequence):
        raise InputError("must be a list of waits", path=f"{path}.cp_async_waits")
    flights = [_count(w, "bytes_in_flight", f"{path}.cp_async_waits[{i}]") for i, w in enumerate(waits)]
    return max(flights) if any(flights) else None


def _shape_sites(shape: Any, path: str) -> dict[str, dict[str, int]]:
    """Each call site's warp instructions by kind (the kinds of a phase's `instructions`)."""
    sites = shape.get("sites", {}) if isinstance(shape, Mapping) else {}
    if not isinstance(sites, Mapping):
        raise InputError("must be an object of call sites", path=f"{path}.sites")
    out = {}
    for site in sites:
        at = f"{path}.sites[{str(site)!r:.60}]"
        ops = _get(sites, site, f"{path}.sites", Mapping)
        unknown = sorted(set(ops) - set(INSTRUCTION_KINDS))
        if unknown:
            raise InputError(f"unknown instruction kind {unknown[0]!r:.40}", path=at)
        out[str(site)] = {kind: _count(ops, kind, at) for kind in ops}
    return out


def parse_kernel(doc: Any, path: str) -> KernelCounters:
    totals = _get(doc, "totals", path, Mapping)
    tpath = f"{path}.totals"
    global_ = _get(totals, "global", tpath, Mapping)
    shared = _get(totals, "shared", tpath, Mapping)
    cp_async = totals.get("cp_async", {}) if isinstance(totals, Mapping) else {}
    in_flight = cp_async.get("bytes_in_flight_at_wait", []) if isinstance(cp_async, Mapping) else []
    if not isinstance(in_flight, Sequence) or any(
        isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in in_flight
    ):
        raise InputError(
            "must be a list of byte counts >= 0", path=f"{tpath}.cp_async.bytes_in_flight_at_wait"
        )
    shapes_doc = _get(doc, "cta_shapes", path, Sequence)
    shapes = []
    for i, shape in enumerate(shapes_doc):
        spath = f"{path}.cta_shapes[{i}]"
        phases_doc = _get(shape, "phases", spath, Sequence)
        phases = tuple(_phase(p, f"{spath}.phases[{j}]") for j, p in enumerate(phases_doc))
        shapes.append(
            CtaShape(
                _count(shape, "count", spath),
                phases,
                _count(shape, "global_bytes", spath),
                _shape_in_flight(shape, spath),
                _shape_sites(shape, spath),
            )
        )
    kernel = KernelCounters(
        name=_get(doc, "name", path, str),
        threads_per_cta=_count(doc, "threads_per_cta", path),
        ctas=_count(doc, "ctas", path),
        dynamic_smem_bytes=_count(doc, "dynamic_smem_bytes", path),
        sectors=_count(global_, "sectors", f"{tpath}.global"),
        unique_sectors=_count(global_, "unique_sectors", f"{tpath}.global"),
        bytes_in_flight_at_wait=tuple(in_flight),
        shared_instructions=_sum_counts(
            _get(shared, "instructions", f"{tpath}.shared", Mapping), f"{tpath}.shared.instructions"
        ),
        shared_wavefronts=_sum_counts(
            _get(shared, "wavefronts", f"{tpath}.shared", Mapping), f"{tpath}.shared.wavefronts"
        ),
        bank_conflicts=_count(shared, "bank_conflicts", f"{tpath}.shared"),
        shapes=tuple(shapes),
        totals=totals,
    )
    if sum(s.count for s in kernel.shapes) != kernel.ctas:
        raise InputError(
            f"the CTA shapes count {sum(s.count for s in kernel.shapes)} CTAs, the kernel {kernel.ctas}",
            path=f"{path}.cta_shapes",
        )
    if kernel.unique_sectors > kernel.sectors:
        raise InputError("unique_sectors exceeds sectors", path=f"{tpath}.global.unique_sectors")
    return kernel


def parse_counters(doc: Any, source: str = "counters", at: str = "") -> list[KernelCounters]:
    """Every kernel of one launch; `source` names the file (or case) in errors, `at` the document's path in
    that file (a --counters file holds one document per case ID)."""
    kernels = doc.get("kernels") if isinstance(doc, Mapping) else None
    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, Sequence):
        raise InputError("must be an object with a 'kernels' list", file=source, path=at or None)
    if not kernels:  # a launch runs at least one kernel; none would model as 0 µs and pass every gate
        raise InputError("is empty: a launch runs at least one kernel", file=source, path=f"{at}kernels")
    try:
        return [parse_kernel(k, f"{at}kernels[{i}]") for i, k in enumerate(kernels)]
    except InputError as err:
        raise InputError(err.reason, file=source, path=err.path) from None

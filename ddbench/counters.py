"""The emulation's exact counters of one launch (verify kernel, then the split combine), as typed records.

The document comes from the runtime (`kernels/emu/counters.h`) or from a file a run saved; docs/emulation.md
defines every field. These records are what the performance model reads too (ddbench/model/kernel_time.py):
the document is parsed once, here, at the edge. `parse_counters` checks the shape and types before anything
reads a number, so a damaged or hand-edited file is an InputError naming the file and the field, never a
KeyError deep in a model. A field the model does not read may be absent and reads as 0 (a counters file
written by hand, or derived rather than counted, need not invent them); one that is present is checked all
the same. Pure: no I/O but `load_counters`, which reads one bounded file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ddbench.errors import InputError

MAX_COUNTERS_BYTES = 256 << 20  # far above a 128k-prefix launch listed CTA by CTA
SECTOR_BYTES = 32  # the unit of `sectors` and `unique_sectors`

SHARED_KINDS = (
    "ld8", "st8", "ld16", "st16", "ld32", "st32", "ld64", "st64", "ld128", "st128",
    "ldmatrix_x1", "ldmatrix_x1_trans", "ldmatrix_x2", "ldmatrix_x2_trans",
    "ldmatrix_x4", "ldmatrix_x4_trans", "cp_async_16", "stmatrix", "cp_async_4",
)  # fmt: skip
INSTRUCTION_KINDS = (
    "mma", "shfl", "ldmatrix", "ld_shared", "st_shared", "ld_global", "st_global", "cp_async", "sync_block",
    "ld_cluster", "sync_cluster", "atom_global",
)  # fmt: skip
# Counted since thread-block clusters, atomics since the final merge and 4-byte copies since the mask words
# went by cp.async: a document written before them reads as 0 where they are missing.
LATER_FIELDS = (
    "ld_cluster", "sync_cluster", "cluster_bytes", "cluster_barriers", "atom_global", "cp_async_4",
    "cluster_arrives",
)  # fmt: skip
CTA_DETAILS = ("all", "shapes", "sampled")


@dataclass(frozen=True)
class GlobalCounters:
    load_bytes: int
    store_bytes: int
    cp_async_bytes: int
    sectors: int  # 32-byte sectors per warp instruction, summed
    unique_sectors: int  # distinct sectors over the launch: a lower bound on DRAM traffic / 32


@dataclass(frozen=True)
class SharedCounters:
    instructions: Mapping[str, int]  # warp instructions by kind (SHARED_KINDS)
    wavefronts: Mapping[str, int]
    bank_conflicts: int  # wavefronts beyond the conflict-free minimum

    def wavefronts_per_instruction(self, kind: str) -> float:
        n = self.instructions.get(kind, 0)
        return self.wavefronts.get(kind, 0) / n if n else 0.0


@dataclass(frozen=True)
class CpAsyncCounters:
    waits: int
    bytes_in_flight_at_wait: tuple[int, ...]  # CTA by CTA (linear index), wait by wait
    late_waits: int


@dataclass(frozen=True)
class Totals:
    barriers: int
    mma: int
    ldmatrix: int
    shuffles: int
    global_: GlobalCounters
    shared: SharedCounters
    cp_async: CpAsyncCounters
    cluster_barriers: int = 0  # of `barriers`, those of the whole cluster (sync_cluster)
    cluster_bytes: int = 0  # read from other CTAs' shared memory (ld_cluster)


@dataclass(frozen=True)
class PhaseCounters:
    """One interval between block barriers of one CTA."""

    mma: int
    shared_wavefronts: int
    global_bytes: int  # loads and cp.async issued in the phase
    global_store_bytes: int
    shuffles: int
    warp_instructions: int
    instructions: Mapping[str, int]  # by INSTRUCTION_KINDS
    cluster_bytes: int = 0  # read from other CTAs' shared memory (ld_cluster)
    cluster_arrives: int = 0  # 1: the phase ends at a cluster_arrive, whose wait comes in a later phase

    @property
    def cluster_barrier(self) -> bool:
        """The phase ends at a cluster barrier (sync_cluster, or a cluster_wait)."""
        return self.instructions.get("sync_cluster", 0) > 0

    @property
    def cluster_arrive(self) -> bool:
        """The phase ends at a cluster_arrive: the barrier's latency runs on behind it up to its wait."""
        return self.cluster_arrives > 0

    @property
    def atomics(self) -> int:
        """Global atomics (warp instructions): from the first one on, a CTA is in its final merge."""
        return self.instructions.get("atom_global", 0)


@dataclass(frozen=True)
class WaitCounters:
    bytes_in_flight: int
    bytes_completed: int
    phases_ahead: int  # -1: the wait completed no data
    late: bool


@dataclass(frozen=True)
class CtaShape:
    """CTAs with identical counts (one CTA each unless the launch grouped them)."""

    count: int
    example_cta: tuple[int, int, int]
    phases: tuple[PhaseCounters, ...]
    barriers: int
    global_bytes: int
    load_bytes: int
    store_bytes: int
    cp_async_bytes: int
    sectors: int
    unique_sectors: int  # within one CTA
    shared_wavefronts: int
    bank_conflicts: int
    cp_async_waits: tuple[WaitCounters, ...]
    cluster_barriers: int = 0
    cluster_bytes: int = 0
    # warp instructions by call site ("verify_attn.cuh:512") and kind: what ties each site's SASS to how
    # often a warp ran it (ddbench/model/sass_count.py); empty in a document written before they were counted
    sites: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def bytes_in_flight(self) -> int | None:
        """The most bytes these CTAs had in flight at one cp.async wait (what their pipeline holds), or None
        where no wait had any (CTAs without copies, or a derived document): the kernel's figure serves."""
        most = max((w.bytes_in_flight for w in self.cp_async_waits), default=0)
        return most or None


@dataclass(frozen=True)
class KernelCounters:
    name: str
    grid: tuple[int, int, int]
    threads_per_cta: int
    ctas: int
    dynamic_smem_bytes: int
    cta_detail: str  # "all": one entry per CTA; "shapes": grouped; "sampled": one CTA per work shape ran
    totals: Totals
    cta_shapes: tuple[CtaShape, ...]
    emulated_ctas: int  # == ctas unless sampled

    @property
    def sampled(self) -> bool:
        return self.cta_detail == "sampled"

    @property
    def sectors(self) -> int:
        return self.totals.global_.sectors

    @property
    def unique_sectors(self) -> int:
        return self.totals.global_.unique_sectors

    @property
    def l2_bytes(self) -> int:
        return self.sectors * SECTOR_BYTES

    @property
    def unique_bytes(self) -> int:
        return self.unique_sectors * SECTOR_BYTES

    @property
    def bytes_in_flight_at_wait(self) -> tuple[int, ...]:
        return self.totals.cp_async.bytes_in_flight_at_wait

    @property
    def shared_instructions(self) -> int:
        return sum(self.totals.shared.instructions.values())

    @property
    def shared_wavefronts(self) -> int:
        return sum(self.totals.shared.wavefronts.values())

    @property
    def bank_conflicts(self) -> int:
        return self.totals.shared.bank_conflicts

    @property
    def wavefronts_per_shared_instruction(self) -> float | None:
        n = self.shared_instructions
        return self.shared_wavefronts / n if n else None

    def with_unique_sectors(self, unique_sectors: int) -> KernelCounters:
        """The same counts with the launch's unique sectors found another way (a sampled run's addresses)."""
        global_ = replace(self.totals.global_, unique_sectors=unique_sectors)
        return replace(self, totals=replace(self.totals, global_=global_))


@dataclass(frozen=True)
class LaunchCounters:
    kernels: tuple[KernelCounters, ...]

    def kernel(self, name: str) -> KernelCounters | None:
        return next((k for k in self.kernels if k.name == name), None)

    def replacing(self, name: str, kernel: KernelCounters) -> LaunchCounters:
        return LaunchCounters(tuple(kernel if k.name == name else k for k in self.kernels))

    def to_json(self) -> dict[str, Any]:
        """The document again, in the runtime's field names (`global`, not `global_`)."""

        def fix(value: Any) -> Any:
            if isinstance(value, dict):
                return {("global" if k == "global_" else k): fix(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [fix(v) for v in value]
            return value

        return fix(asdict(self))


# ------------------------------------------------------------------------------------------ parsing --


class _Reader:
    """Typed field access that names the file and the JSON path of whatever is wrong."""

    def __init__(self, file: str | None) -> None:
        self.file = file

    def fail(self, path: str, reason: str) -> InputError:
        return InputError(reason, file=self.file, path=path)

    def obj(self, value: object, path: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, not {type(value).__name__}")
        return value

    def field(self, obj: Mapping[str, Any], key: str, path: str) -> Any:
        if key not in obj:
            raise self.fail(f"{path}.{key}", "missing")
        return obj[key]

    def count(
        self, obj: Mapping[str, Any], key: str, path: str, minimum: int = 0, optional: bool = False
    ) -> int:
        """An integer field; `optional` (or a field from LATER_FIELDS): absent reads as 0."""
        if key not in obj and (optional or key in LATER_FIELDS):
            return 0
        value = self.field(obj, key, path)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(f"{path}.{key}", f"must be an integer >= {minimum}, not {value!r:.40}")
        return value

    def array(self, obj: Mapping[str, Any], key: str, path: str, optional: bool = False) -> list[Any]:
        if key not in obj and optional:
            return []
        value = self.field(obj, key, path)
        if not isinstance(value, list):
            raise self.fail(f"{path}.{key}", f"must be an array, not {type(value).__name__}")
        return value

    def triple(self, obj: Mapping[str, Any], key: str, path: str, minimum: int) -> tuple[int, int, int]:
        value = self.array(obj, key, path)
        ok = len(value) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
        )
        if not ok:
            raise self.fail(f"{path}.{key}", f"must be three integers >= {minimum}")
        return (value[0], value[1], value[2])

    def by_kind(
        self, obj: Mapping[str, Any], key: str, path: str, kinds: tuple[str, ...], optional: bool = False
    ) -> dict[str, int]:
        """A table of counts by kind: every kind of `kinds` (absent ones read as 0), no other."""
        if key not in obj and optional:
            return dict.fromkeys(kinds, 0)
        table = self.obj(self.field(obj, key, path), f"{path}.{key}")
        unknown = sorted(set(table) - set(kinds))
        if unknown:
            raise self.fail(f"{path}.{key}", f"unknown kind {unknown[0]!r:.40}")
        return {kind: self.count(table, kind, f"{path}.{key}", optional=True) for kind in kinds}


def _phase(r: _Reader, value: object, path: str) -> PhaseCounters:
    o = r.obj(value, path)
    return PhaseCounters(
        mma=r.count(o, "mma", path),
        shared_wavefronts=r.count(o, "shared_wavefronts", path),
        global_bytes=r.count(o, "global_bytes", path),
        global_store_bytes=r.count(o, "global_store_bytes", path, optional=True),
        shuffles=r.count(o, "shuffles", path, optional=True),
        warp_instructions=r.count(o, "warp_instructions", path),
        instructions=r.by_kind(o, "instructions", path, INSTRUCTION_KINDS, optional=True),
        cluster_bytes=r.count(o, "cluster_bytes", path),
        cluster_arrives=r.count(o, "cluster_arrives", path),
    )


def _wait(r: _Reader, value: object, path: str) -> WaitCounters:
    o = r.obj(value, path)
    late = o.get("late", False)
    if not isinstance(late, bool):
        raise r.fail(f"{path}.late", "must be true or false")
    return WaitCounters(
        bytes_in_flight=r.count(o, "bytes_in_flight", path),
        bytes_completed=r.count(o, "bytes_completed", path, optional=True),
        phases_ahead=r.count(o, "phases_ahead", path, minimum=-1, optional=True),
        late=late,
    )


def _shape(r: _Reader, value: object, path: str) -> CtaShape:
    """One CTA shape: its count, phases and waits are what the model reads; the rest is detail (absent: 0)."""
    o = r.obj(value, path)
    phases = r.array(o, "phases", path)
    waits = r.array(o, "cp_async_waits", path, optional=True)

    def detail(key: str) -> int:
        return r.count(o, key, path, optional=True)

    return CtaShape(
        count=r.count(o, "count", path, minimum=1),
        example_cta=r.triple(o, "example_cta", path, 0) if "example_cta" in o else (0, 0, 0),
        phases=tuple(_phase(r, p, f"{path}.phases[{i}]") for i, p in enumerate(phases)),
        barriers=detail("barriers"),
        global_bytes=detail("global_bytes"),
        load_bytes=detail("load_bytes"),
        store_bytes=detail("store_bytes"),
        cp_async_bytes=detail("cp_async_bytes"),
        sectors=detail("sectors"),
        unique_sectors=detail("unique_sectors"),
        shared_wavefronts=detail("shared_wavefronts"),
        bank_conflicts=detail("bank_conflicts"),
        cp_async_waits=tuple(_wait(r, w, f"{path}.cp_async_waits[{i}]") for i, w in enumerate(waits)),
        cluster_barriers=r.count(o, "cluster_barriers", path),
        cluster_bytes=r.count(o, "cluster_bytes", path),
        sites=_sites(r, o, path),
    )


def _sites(r: _Reader, shape: Mapping[str, Any], path: str) -> dict[str, dict[str, int]]:
    if "sites" not in shape:
        return {}
    table = r.obj(shape["sites"], f"{path}.sites")
    out: dict[str, dict[str, int]] = {}
    for where, ops in table.items():
        at = f"{path}.sites[{where!r:.60}]"
        kinds = r.obj(ops, at)
        unknown = set(kinds) - set(INSTRUCTION_KINDS)
        if unknown:
            raise r.fail(at, f"unknown instruction kind {sorted(unknown)[0]!r:.40}")
        out[where] = {kind: r.count(kinds, kind, at, minimum=1) for kind in kinds}
    return out


def _totals(r: _Reader, value: object, path: str) -> Totals:
    o = r.obj(value, path)
    g = r.obj(r.field(o, "global", path), f"{path}.global")
    s = r.obj(r.field(o, "shared", path), f"{path}.shared")
    c = r.obj(o.get("cp_async", {}), f"{path}.cp_async")
    in_flight = r.array(c, "bytes_in_flight_at_wait", f"{path}.cp_async", optional=True)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in in_flight):
        raise r.fail(f"{path}.cp_async.bytes_in_flight_at_wait", "must hold integers >= 0")
    sectors = r.count(g, "sectors", f"{path}.global")
    unique = r.count(g, "unique_sectors", f"{path}.global")
    if unique > sectors:
        raise r.fail(f"{path}.global.unique_sectors", f"{unique} exceeds sectors ({sectors})")
    return Totals(
        barriers=r.count(o, "barriers", path, optional=True),
        mma=r.count(o, "mma", path, optional=True),
        ldmatrix=r.count(o, "ldmatrix", path, optional=True),
        shuffles=r.count(o, "shuffles", path, optional=True),
        global_=GlobalCounters(
            load_bytes=r.count(g, "load_bytes", f"{path}.global", optional=True),
            store_bytes=r.count(g, "store_bytes", f"{path}.global", optional=True),
            cp_async_bytes=r.count(g, "cp_async_bytes", f"{path}.global", optional=True),
            sectors=sectors,
            unique_sectors=unique,
        ),
        shared=SharedCounters(
            instructions=r.by_kind(s, "instructions", f"{path}.shared", SHARED_KINDS),
            wavefronts=r.by_kind(s, "wavefronts", f"{path}.shared", SHARED_KINDS),
            bank_conflicts=r.count(s, "bank_conflicts", f"{path}.shared"),
        ),
        cp_async=CpAsyncCounters(
            waits=r.count(c, "waits", f"{path}.cp_async", optional=True),
            bytes_in_flight_at_wait=tuple(in_flight),
            late_waits=r.count(c, "late_waits", f"{path}.cp_async", optional=True),
        ),
        cluster_barriers=r.count(o, "cluster_barriers", path),
        cluster_bytes=r.count(o, "cluster_bytes", path),
    )


def _kernel(r: _Reader, value: object, path: str) -> KernelCounters:
    o = r.obj(value, path)
    name = r.field(o, "name", path)
    if not isinstance(name, str) or not name:
        raise r.fail(f"{path}.name", "must be a non-empty string")
    detail = o.get("cta_detail", "all")
    if detail not in CTA_DETAILS:
        raise r.fail(f"{path}.cta_detail", f"must be one of {', '.join(CTA_DETAILS)}")
    shapes = tuple(
        _shape(r, s, f"{path}.cta_shapes[{i}]") for i, s in enumerate(r.array(o, "cta_shapes", path))
    )
    ctas = r.count(o, "ctas", path)
    kernel = KernelCounters(
        name=name,
        grid=r.triple(o, "grid", path, 1) if "grid" in o else (max(ctas, 1), 1, 1),
        threads_per_cta=r.count(o, "threads_per_cta", path, minimum=1),
        ctas=ctas,
        dynamic_smem_bytes=r.count(o, "dynamic_smem_bytes", path),
        cta_detail=detail,
        totals=_totals(r, r.field(o, "totals", path), f"{path}.totals"),
        cta_shapes=shapes,
        emulated_ctas=r.count(o, "emulated_ctas", path) if "emulated_ctas" in o else ctas,
    )
    if sum(s.count for s in shapes) != kernel.ctas:
        raise r.fail(
            f"{path}.cta_shapes", f"counts add up to {sum(s.count for s in shapes)}, not ctas={kernel.ctas}"
        )
    return kernel


def parse_counters(doc: object, file: str | None = None, at: str = "$") -> LaunchCounters:
    """The typed counters of a `{"kernels": [...]}` document; InputError names the file and field at fault
    (`at`: where the document sits in its file)."""
    r = _Reader(file)
    kernels = doc.get("kernels") if isinstance(doc, dict) else None
    if not isinstance(kernels, list):
        raise r.fail(at, "the counters must be an object with a 'kernels' list")
    if not kernels:  # a launch runs at least one kernel; none would model as 0 µs and pass every gate
        raise r.fail(f"{at}.kernels", "is empty: a launch runs at least one kernel")
    return LaunchCounters(tuple(_kernel(r, k, f"{at}.kernels[{i}]") for i, k in enumerate(kernels)))


def load_counters(path: Path | str, limit: int = MAX_COUNTERS_BYTES) -> LaunchCounters:
    """A counters file written by a run; at most `limit` bytes are read."""
    p = Path(path)
    try:
        with p.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=str(p)) from None
    if len(data) > limit:
        raise InputError(f"larger than {limit} bytes: not a counters file", file=str(p))
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not JSON: {err}", file=str(p)) from None
    return parse_counters(doc, str(p))

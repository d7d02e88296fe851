"""SASS instructions per counted primitive: ncu's count of a launch over the emulation's count of the same.

The emulation counts the ddk primitives a kernel calls, not the index arithmetic, softmax or loop control the
GPU issues besides; the model multiplies the counts by `GpuSpec.verify_instructions_per_counted` and
`combine_instructions_per_counted` (ddbench/gpus.py), measured this way. A device run's ncu step
profiles a few shapes (`ddbench/device/check.py`, NCU_CASES) and exports `ncu-raw.csv`, one row a launch with
`smsp__inst_executed.sum`; the emulation counts the same cases, planned for the same GPU, and each launch's
ratio follows. Where nvcc is installed, each launch's SASS count (the model's issue term, its likely figure:
ddbench/model/sass_count.py) is set beside ncu's too, the check of that count. The counts must be of the
kernel that ran: the ncu step records its kernel hash, and a tree whose kernel differs is refused (run this
in a worktree of the run's commit). Where the export holds ncu's source page (`ncu-source.csv`: each SASS
instruction's executed count), the count is checked block by block too: how many instructions the model
puts in the wrong blocks (`block_error`, a share of ncu's), which the launch's total can hide.

    python -m ddbench.device.instruction_ratio DEVICE_CHECK_JSON NCU_ZIP_OR_CSV [OUT_JSON]
"""

from __future__ import annotations

import csv
import io
import json
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddbench.atomic import write_json_atomic
from ddbench.counters import KernelCounters, LaunchCounters
from ddbench.device.cases import suite_cases
from ddbench.device.plan_sweep import SWEEP_SUITE
from ddbench.errors import InputError
from ddbench.gpus import gpu_key_of_device, gpu_spec
from ddbench.kernel.cuda_build import kernel_sources_hash
from ddbench.model.warp_instructions import with_issue_count
from ddbench.runner import Session, SessionOptions
from ddbench.runner.modeled_run import ModelRequest

INSTRUCTIONS = "smsp__inst_executed.sum"
KERNEL_PREFIXES = (("verify_attention_kernel", "verify"), ("combine_parts_kernel", "combine"))
RAW_CSV = "ncu-raw.csv"
SOURCE_CSV = "ncu-source.csv"
EXECUTED = "Instructions Executed"


def _kernel_of(name: str) -> str | None:
    """The emulation's name of a kernel ncu names (without its namespace), None for another kernel."""
    name = name.split("(")[0].split("::")[-1]
    return next((short for prefix, short in KERNEL_PREFIXES if name.startswith(prefix)), None)


@dataclass(frozen=True)
class ModeledLaunch:
    """The model's SASS count of one launch: its likely figure, and each block's instructions with its likely
    warp passes over the launch."""

    likely: float
    blocks: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class NcuLaunch:
    kernel: str  # "verify" or "combine", as the emulation's counters name it
    ctas: int
    instructions: int  # SASS warp instructions executed, every SM sub-partition


@dataclass(frozen=True)
class LaunchRatio:
    case: str
    kernel: str
    ctas: int
    sass: int
    counted: int
    modeled: float | None = None  # the model's SASS count of the launch (likely), where a SASS map was built
    # the instructions the model puts in other blocks than ncu saw, over ncu's (None: no source page, or
    # another SASS than this tree's)
    block_error: float | None = None

    @property
    def ratio(self) -> float:
        return self.sass / self.counted

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "kernel": self.kernel,
            "ctas": self.ctas,
            "sass_instructions": self.sass,
            "counted_instructions": self.counted,
            "ratio": round(self.ratio, 3),
            "modeled_sass_instructions": None if self.modeled is None else round(self.modeled),
            "modeled_error": None if self.modeled is None else round(self.modeled / self.sass - 1, 4),
            "block_error": None if self.block_error is None else round(self.block_error, 4),
        }


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def ncu_launches(csv_text: str, source: str) -> list[NcuLaunch]:
    """The launches of an `ncu --csv --page raw` export, in order (its second row gives the units)."""
    rows = list(csv.reader(io.StringIO(csv_text)))
    if not rows:
        raise InputError("empty: no header row", file=source)
    header = rows[0]
    for column in ("Kernel Name", "launch__grid_size", INSTRUCTIONS):
        if column not in header:
            raise InputError(f"no column {column!r}: not an ncu raw page with the full set", file=source)
    name_at, grid_at, inst_at = (header.index(c) for c in ("Kernel Name", "launch__grid_size", INSTRUCTIONS))
    launches = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header) or not row[name_at]:  # the units row, or a blank one
            continue
        kernel = _kernel_of(row[name_at])
        if kernel is None:
            continue
        try:
            launches.append(NcuLaunch(kernel, int(_number(row[grid_at])), int(_number(row[inst_at]))))
        except ValueError:
            reason = f"row {line}: a grid or instruction count that is not a number"
            raise InputError(reason, file=source) from None
    return launches


def ncu_source_counts(csv_text: str, source: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every page of ncu's source page (its sass view) for a ddbench kernel, in order: (kernel, each SASS
    instruction's executed warp instructions). ncu prints a launch's page twice over (see source_pages)."""
    pages: list[tuple[str, list[int]]] = []
    executed_at: int | None = None
    for line, row in enumerate(csv.reader(io.StringIO(csv_text)), start=1):
        if len(row) >= 2 and row[0] == "Kernel Name":
            pages.append((_kernel_of(row[1]) or "", []))
            executed_at = None
        elif row and row[0] == "Address":
            if EXECUTED not in row:
                raise InputError(f"row {line}: no column {EXECUTED!r}", file=source)
            executed_at = row.index(EXECUTED)
        elif row and pages and executed_at is not None:
            count = row[executed_at].replace(",", "") if len(row) > executed_at else ""
            if not count.isdigit():
                reason = f"row {line}: an executed count that is not a whole number: {count!r:.30}"
                raise InputError(reason if count else f"row {line}: a row cut short", file=source)
            pages[-1][1].append(int(count))
    return [(kernel, tuple(counts)) for kernel, counts in pages if kernel]


def source_pages(
    pages: Sequence[tuple[str, tuple[int, ...]]], launches: Sequence[NcuLaunch], source: str
) -> list[tuple[int, ...]]:
    """Each launch's page: ncu's pages in the raw page's launch order, each printed once or twice in a row.
    Each must be its launch's kernel and add up to its instruction count, else it is another export."""
    if len(pages) == 2 * len(launches) and all(pages[k] == pages[k + 1] for k in range(0, len(pages), 2)):
        pages = pages[::2]
    if len(pages) != len(launches):
        raise InputError(f"{len(pages)} pages for the raw page's {len(launches)} launches", file=source)
    for k, ((kernel, counts), launch) in enumerate(zip(pages, launches, strict=True), start=1):
        if kernel != launch.kernel or sum(counts) != launch.instructions:
            raise InputError(
                f"page {k} is {kernel} with {sum(counts):,} instructions, the raw page's launch {k} "
                f"{launch.kernel} with {launch.instructions:,}: not the same launches",
                file=source,
            )
    return [counts for _, counts in pages]


def block_error(blocks: Sequence[tuple[int, float]], executed: Sequence[int]) -> float | None:
    """The instructions a modeled launch puts in other blocks than ncu saw, over ncu's: each block's
    instructions run as often as its first (a predicated-off instruction still issues). None where the SASS
    is not the same size (another kernel than this tree's)."""
    if sum(n for n, _ in blocks) != len(executed) or not any(executed):
        return None
    off, at = 0.0, 0
    for n, runs in blocks:
        off += n * abs(runs - executed[at])
        at += n
    return off / sum(executed)


def counted_instructions(kernel: KernelCounters) -> int:
    """The warp instructions the emulation counted in one kernel launch: every CTA shape's phases, times the
    CTAs of that shape (a sampled run counts one CTA a shape for all of them)."""
    return sum(
        shape.count * sum(phase.warp_instructions for phase in shape.phases) for shape in kernel.cta_shapes
    )


def launch_ratios(
    counted: Sequence[tuple[str, LaunchCounters]],
    launches: Sequence[NcuLaunch],
    modeled: Callable[[KernelCounters], ModeledLaunch | None] = lambda kernel: None,
    executed: Sequence[tuple[int, ...]] = (),
) -> list[LaunchRatio]:
    """Pair each case's counted launches (its counters, kernels in launch order) with ncu's, in
    order; a kernel or grid that differs means another kernel or plan ran than this tree's, and is refused.
    `modeled(kernel)`: the model's SASS count of a launch, or None; `executed`: each launch's source page
    (source_pages), where the export has one."""
    ratios = []
    at = 0
    for case, launch in counted:
        for kernel in launch.kernels:
            if at >= len(launches):
                raise InputError(f"ncu has {len(launches)} launches; {case} needs more", file=RAW_CSV)
            ncu = launches[at]
            at += 1
            if (ncu.kernel, ncu.ctas) != (kernel.name, kernel.ctas):
                raise InputError(
                    f"launch {at} is {ncu.kernel} on {ncu.ctas} CTAs, the emulation's {case} launches "
                    f"{kernel.name} on {kernel.ctas}: another kernel or plan ran than this tree's",
                    file=RAW_CSV,
                )
            count = counted_instructions(kernel)
            model = modeled(kernel)
            page = executed[at - 1] if executed else None
            error = None
            if model is not None and page is not None:
                error = block_error(model.blocks, page)
            likely = None if model is None else model.likely
            ratios.append(LaunchRatio(case, ncu.kernel, ncu.ctas, ncu.instructions, count, likely, error))
    if at != len(launches):
        raise InputError(f"ncu has {len(launches) - at} launches more than the cases make", file=RAW_CSV)
    return ratios


def by_kernel(ratios: Sequence[LaunchRatio]) -> dict[str, dict[str, float]]:
    """Each kernel's lowest, highest and instruction-weighted ratio over the launches."""
    summary = {}
    for kernel in dict.fromkeys(r.kernel for r in ratios):
        mine = [r for r in ratios if r.kernel == kernel]
        summary[kernel] = {
            "min": round(min(r.ratio for r in mine), 3),
            "max": round(max(r.ratio for r in mine), 3),
            "weighted": round(sum(r.sass for r in mine) / sum(r.counted for r in mine), 3),
        }
    return summary


def _pages(path: Path) -> tuple[str, str | None]:
    """The raw page and, in an export's zip that holds it, the source page."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            source = archive.read(SOURCE_CSV).decode() if SOURCE_CSV in names else None
            return archive.read(RAW_CSV).decode(), source
    return path.read_text(), None


def _at(document: Any, *keys: str) -> Any:
    """document[k1][k2]..., or None where a level is missing or not an object."""
    for key in keys:
        document = document.get(key) if isinstance(document, Mapping) else None
    return document


def _ncu_step(report: Any) -> Mapping[str, Any]:
    """The device check's ncu step, with the case IDs it profiled, on a device that is named."""
    cases = _at(report, "steps", "ncu", "cases")
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        raise InputError("no ncu step with its cases", path="steps.ncu.cases")
    if not isinstance(_at(report, "environment", "device", "name"), str):
        raise InputError("no device name", path="environment.device.name")
    return report["steps"]["ncu"]


def measure(report: Mapping[str, Any], csv_text: str, source_text: str | None = None) -> dict[str, Any]:
    """The ratios of a device run's ncu step against this tree's emulation (CPU work: minutes, long cases);
    `source_text`: its source page, where it has one."""
    ncu = _ncu_step(report)
    ran, tree = ncu.get("kernel_hash"), kernel_sources_hash()
    if ran is not None and ran != tree:
        raise InputError(f"the run's kernel is {ran}, this tree's {tree}: count the kernel that ran")
    device = report["environment"]["device"]["name"]  # checked by _ncu_step
    key = gpu_key_of_device(device)
    if key is None:
        raise InputError(f"the model has no table for {device}")
    suite = ncu.get("suite", SWEEP_SUITE)  # runs before the step recorded it profiled that suite's cases
    by_id = {c.id: c for c in suite_cases(suite, None)}
    missing = [i for i in ncu["cases"] if i not in by_id]
    if missing:
        raise InputError(f"no case {missing[0]!r} in this tree's suite", file=suite)
    launches = ncu_launches(csv_text, RAW_CSV)  # the pages read before minutes of emulation
    pages = ncu_source_counts(source_text, SOURCE_CSV) if source_text is not None else []
    executed = source_pages(pages, launches, SOURCE_CSV) if source_text is not None else []
    gpu = gpu_spec(key)
    options = SessionOptions(
        suites=(suite,), case_ids=tuple(ncu["cases"]), model=ModelRequest(key, keep_counters=True)
    )
    outcome = Session(options).run_modeled()
    counted = [(c.case_id, c.counters) for c in outcome.cases if c.counters is not None]
    sass = outcome.sass

    def modeled(kernel: KernelCounters) -> ModeledLaunch | None:
        _, issue = with_issue_count(kernel, gpu, sass)
        if issue.method != "sass" or sass is None:
            return None
        sizes = [b.instructions for b in sass[kernel.name].blocks]
        return ModeledLaunch(issue.likely, tuple(zip(sizes, issue.block_runs, strict=True)))

    ratios = launch_ratios(counted, launches, modeled, executed)
    return {
        "gpu": key,
        "kernel_hash": tree,
        "kernel_hash_checked": ran is not None,
        "launches": [r.to_json() for r in ratios],
        "by_kernel": by_kernel(ratios),
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(
            "usage: python -m ddbench.device.instruction_ratio DEVICE_CHECK_JSON NCU_ZIP_OR_CSV [OUT_JSON]",
            file=sys.stderr,
        )
        return 2
    try:
        report = json.loads(Path(argv[0]).read_text())
        _ncu_step(report)
        result = measure(report, *_pages(Path(argv[1])))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        print(f"instruction_ratio: cannot read the run: {err}", file=sys.stderr)
        return 2
    except InputError as err:
        where = f"{argv[0]}: " if err.file is None else ""
        print(f"instruction_ratio: {where}{err.message}", file=sys.stderr)
        return 2
    if not result["kernel_hash_checked"]:
        print("note: the run recorded no kernel hash; the counts are this tree's kernel", file=sys.stderr)
    for r in result["launches"]:
        line = f"{r['case']}  {r['kernel']:8} {r['ctas']:6} CTAs  {r['ratio']:.2f} SASS a counted primitive"
        if r["modeled_error"] is not None:
            line += f"; modeled {r['modeled_error']:+.1%}"
        if r["block_error"] is not None:
            line += f", {r['block_error']:.1%} in other blocks"
        print(line)
    for kernel, s in result["by_kernel"].items():
        print(f"{kernel}: {s['min']:.2f} .. {s['max']:.2f}, weighted {s['weighted']:.2f}")
    if len(argv) == 3:
        write_json_atomic(Path(argv[2]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

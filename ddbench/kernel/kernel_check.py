"""`make kernel-check`: nvcc builds the verify kernels as cubins for sm_120 and sm_90 with --resource-usage;
every kernel must build with no spills, at most 255 registers and at most 99 KB of shared memory per block,
and (where cuobjdump is installed) its SASS must use HMMA and none of Hopper's or datacenter Blackwell's
tensor instructions (HGMMA, UTC*), which sm_120 lacks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ddbench.errors import InputError
from ddbench.kernel.build import find_kernels_dir, find_nvcc, nvcc_available
from ddbench.kernel.plan import COMBINE_SMEM_BYTES, MAX_SMEM_BYTES
from ddbench.kernel.resources import (
    KernelResources,
    SassCensus,
    parse_resource_usage,
    sass_census,
    violations,
)
from ddbench.kernel.sass_map import KernelSass, parse_sass

ARCHS = ("sm_120", "sm_90")
CUBIN_SOURCE = Path("verify") / "verify_cubin.cu"
# -lineinfo: nvdisasm names each instruction's source line (the SASS map); the code is the same without it
NVCC_FLAGS = ("-std=c++17", "-O3", "-cubin", "--resource-usage", "-lineinfo")
# The launch's largest dynamic shared memory, per kernel (static shared memory comes from the ptxas report).
DYNAMIC_SMEM = {"verify_attention_kernel": MAX_SMEM_BYTES, "combine_parts_kernel": COMBINE_SMEM_BYTES}


@dataclass
class ArchReport:
    arch: str
    kernels: list[KernelResources] = field(default_factory=list)
    sass: SassCensus | None = None
    sass_unavailable: str | None = None
    problems: list[str] = field(default_factory=list)
    sass_map: dict[str, KernelSass] | None = None  # the kernels' basic blocks and anchors (nvdisasm -gi)
    sass_map_unavailable: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "arch": self.arch,
            "ok": self.ok,
            "problems": self.problems,
            "kernels": [vars(k) for k in self.kernels],
            "sass": dict(self.sass.opcodes) if self.sass else None,
            "sass_unavailable": self.sass_unavailable,
        }


def find_cuobjdump() -> tuple[list[str] | None, dict[str, str], str | None]:
    """cuobjdump (and the nvdisasm it calls) from PATH or the nvidia-cuda-cuobjdump/-nvdisasm wheels."""
    env = dict(os.environ)
    wheel_bin = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(p) for p in wheel_bin.glob("site-packages/nvidia/cu*/bin")]
    env["PATH"] = os.pathsep.join([*map(str, candidates), env.get("PATH", "")])
    tool = shutil.which("cuobjdump", path=env["PATH"])
    if tool is None:
        return None, env, "cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    if shutil.which("nvdisasm", path=env["PATH"]) is None:
        return None, env, "nvdisasm not found (pip install nvidia-cuda-nvdisasm)"
    return [tool], env, None


def check_arch(arch: str, workdir: Path) -> ArchReport:
    report = ArchReport(arch)
    kernels = find_kernels_dir()
    cubin = workdir / f"verify_{arch}.cubin"
    cmd = [
        str(find_nvcc()),
        *NVCC_FLAGS,
        f"-arch={arch}",
        f"-I{kernels / 'include'}",
        f"-I{kernels}",
        "-o",
        str(cubin),
        str(kernels / CUBIN_SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        report.problems.append(f"nvcc failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return report
    report.kernels = parse_resource_usage(proc.stdout + proc.stderr)
    if not report.kernels:
        report.problems.append("nvcc reported no kernel")
    for k in report.kernels:
        smem = DYNAMIC_SMEM.get(k.short_name)
        if smem is None:
            report.problems.append(
                f"{k.short_name}: unknown kernel (add its dynamic shared memory to DYNAMIC_SMEM)"
            )
            continue
        report.problems += [f"{k.short_name}: {v}" for v in violations(k, smem)]
    tool, env, why_not = find_cuobjdump()
    if tool is None:
        report.sass_unavailable = why_not
        return report
    listing = subprocess.run(
        [*tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False
    )
    if listing.returncode != 0:
        report.sass_unavailable = f"cuobjdump failed: {listing.stderr.strip()[:500]}"
        return report
    report.sass = sass_census(listing.stdout)
    report.sass_map = _sass_map(cubin, env, report)
    if report.sass.count("HMMA") == 0:
        report.problems.append("no HMMA in the SASS: the tensor cores are not used")
    if report.sass.forbidden:
        report.problems.append(f"instructions sm_120 lacks: {', '.join(report.sass.forbidden)}")
    return report


def _sass_map(cubin: Path, env: dict[str, str], report: ArchReport) -> dict[str, KernelSass] | None:
    nvdisasm = shutil.which("nvdisasm", path=env["PATH"])
    listing = subprocess.run(
        [str(nvdisasm), "-gi", "-c", str(cubin)], capture_output=True, text=True, env=env, check=False
    )
    if listing.returncode != 0:
        report.sass_map_unavailable = f"nvdisasm failed: {listing.stderr.strip()[:500]}"
        return None
    sources = {p.name: p.read_text() for p in find_kernels_dir().rglob("*.cuh")}
    try:
        return parse_sass(listing.stdout, sources, where=f"nvdisasm -gi of {cubin.name}")
    except InputError as err:  # a listing this parser does not know: the model counts by ratio, and says so
        report.sass_map_unavailable = str(err)
        return None


def kernel_check(archs: tuple[str, ...] = ARCHS) -> list[ArchReport]:
    """Raises RuntimeError with the reason when nvcc is unavailable."""
    if (reason := nvcc_available()) is not None:
        raise RuntimeError(reason)
    with tempfile.TemporaryDirectory(prefix="ddbench-kernel-check-") as tmp:
        return [check_arch(arch, Path(tmp)) for arch in archs]

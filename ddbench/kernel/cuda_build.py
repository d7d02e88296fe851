"""JIT build of the kernel's PyTorch binding on a CUDA machine (torch.utils.cpp_extension, ninja), cached.

Built for the local GPU's architecture only; the build folder is keyed by a hash of the kernel sources, so a
kernel change rebuilds and an unchanged kernel loads at once.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from ddbench.kernel.build import build_dir, find_kernels_dir

BINDING = Path("verify") / "verify_torch.cu"


def kernel_sources_hash() -> str:
    """Hash of every kernel source and header: what a baseline records as the kernel's version."""
    kernels = find_kernels_dir()
    digest = hashlib.sha256()
    for path in sorted(
        p for p in kernels.rglob("*") if p.is_file() and p.suffix in {".cu", ".cuh", ".h", ".cpp"}
    ):
        digest.update(str(path.relative_to(kernels)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class KernelNotBuilt(RuntimeError):
    """No cached build of the binding for this GPU and these sources, and building was not allowed."""


def _build_folder(name: str) -> tuple[str, Path]:
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    return arch, build_dir() / f"{name}-sm{arch}-{kernel_sources_hash()}"


def built_extension(name: str = "ddbench_verify") -> Path | None:
    """The cached build of the binding for the current GPU and the current sources, if there is one."""
    arch, directory = _build_folder(name)
    library = directory / f"{name}_sm{arch}.so"
    return library if library.is_file() else None


@cache
def load_cuda_extension(
    binding: Path = BINDING, name: str = "ddbench_verify", build: bool = True
) -> ModuleType:
    """Build (or load the cached build of) a kernels/ binding for the local GPU's architecture; with
    `build` False, only a cached build is loaded (KernelNotBuilt otherwise): a serving process must not
    start eight nvcc builds at once, one per TP rank."""
    from torch.utils.cpp_extension import load

    arch, directory = _build_folder(name)
    if not build and built_extension(name) is None:
        raise KernelNotBuilt(
            f"the kernel is not built for sm_{arch} at source hash {kernel_sources_hash()} "
            f"(no {directory.name} in {directory.parent}): run `ddbench apply build` before serving"
        )
    kernels = find_kernels_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return load(
        name=f"{name}_sm{arch}",
        sources=[str(kernels / binding)],
        extra_include_paths=[str(kernels / "include"), str(kernels)],
        extra_cuda_cflags=["-O3", "-std=c++17", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        build_directory=str(directory),
        verbose=False,
    )

"""Builds of the custom kernel's C++ sources for the host emulation (g++), and whether nvcc is usable here.

Kernel source written against ``kernels/include/ddk/primitives.h`` compiles with ``-DDDK_EMULATE`` into a
shared library that also holds the emulation runtime (the ``RUNTIME_SOURCES`` under ``kernels/emu/``, always
added).

The kernel sources are the repository's ``kernels/`` folder in a source checkout (editable install) and
the package data ``ddbench/kernel_sources/`` in an installed wheel (pyproject.toml maps one onto the other).
Objects and libraries land under ``<repo>/build/ddk/`` (git-ignored) in a checkout; an installed copy
(site-packages may be read-only) builds into ``$XDG_CACHE_HOME/ddbench/ddk`` (``~/.cache/ddbench/ddk``);
``$DDBENCH_BUILD_DIR`` overrides both. Outputs are named by a hash of everything that goes
into them (source, every header under ``kernels/include`` and ``kernels/emu``, flags, compiler version):
an unchanged tree reuses them, any change rebuilds. Each source compiles to its own cached object, in
parallel, so editing a kernel does not recompile the runtime. Files appear atomically (written under a
temporary name, then renamed), so concurrent builds (pytest-xdist) never see half-written output.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPILE_FLAGS = ("-std=c++20", "-O2", "-fPIC", "-DDDK_EMULATE")
LINK_FLAGS = ("-shared", "-pthread")
_HEADER_SUFFIXES = {".h", ".hpp", ".cuh", ".inc"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_COMPILE_TIMEOUT_S = 900
_KEEP_VERSIONS = 4  # older builds of the same name are pruned once they are also
_PRUNE_AGE_S = 3600  # this old, so a concurrent user of one is never pulled from under it
# The emulation runtime's sources under kernels/emu/, one concept a file (kernels/emu/README.md, "Files"):
# every emulation library links all of them. tests/test_emu_primitives.py checks that the folder holds no
# other runtime source.
RUNTIME_SOURCES = (
    "async_copy.cpp",
    "blocks.cpp",
    "cluster.cpp",
    "collectives.cpp",
    "counting.cpp",
    "deadlock.cpp",
    "fibers.cpp",
    "launch.cpp",
    "messages.cpp",
    "report.cpp",
    "sanitizer.cpp",
    "scheduler.cpp",
    "trace.cpp",
)


class KernelBuildError(RuntimeError):
    """A compile or link step failed; the message carries the command and the compiler's stderr."""

    def __init__(self, message: str, *, command: Sequence[str] = (), stderr: str = "") -> None:
        self.command = list(command)
        self.stderr = stderr
        super().__init__(message)


PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGED_KERNELS = "kernel_sources"  # the package-data name of kernels/ inside an installed ddbench
BUILD_DIR_ENV = "DDBENCH_BUILD_DIR"
_MARKER = Path("include") / "ddk" / "primitives.h"  # a folder holding this is ddbench's kernels/


def locate_kernels(package_dir: Path, repo_root: Path) -> Path:
    """The kernels folder: the installed package data first, then a source checkout's ``kernels/``.

    The packaged copy wins because an installed ddbench's ``repo_root`` is site-packages, where an
    unrelated top-level ``kernels`` package may live (SGLang's environment has one).
    """
    for candidate in (package_dir / PACKAGED_KERNELS, repo_root / "kernels"):
        if (candidate / _MARKER).is_file():
            return candidate
    raise KernelBuildError(
        f"the kernel sources are missing: neither {package_dir / PACKAGED_KERNELS} (an installed ddbench)"
        f" nor {repo_root / 'kernels'} (a source checkout) holds {_MARKER}; reinstall ddbench"
    )


def find_kernels_dir() -> Path:
    """The folder with ``include/ddk/primitives.h``, the emulation runtime in ``emu/``, kernel sources."""
    return locate_kernels(PACKAGE_DIR, REPO_ROOT)


def choose_build_dir(kernels: Path, repo_root: Path, env: Mapping[str, str], home: Path) -> Path:
    """A checkout builds beside its sources (``<repo>/build/ddk``), an installed copy into the user cache."""
    if env.get(BUILD_DIR_ENV):
        return Path(env[BUILD_DIR_ENV])
    if kernels == repo_root / "kernels":
        return repo_root / "build" / "ddk"
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    return cache / "ddbench" / "ddk"


def build_dir() -> Path:
    return choose_build_dir(find_kernels_dir(), REPO_ROOT, os.environ, Path.home())


def find_nvcc() -> Path | None:
    """nvcc on PATH, else under $CUDA_HOME / $CUDA_PATH / /usr/local/cuda; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return Path(root) / "bin" / "nvcc"
    return None


@functools.lru_cache(maxsize=1)
def nvcc_available() -> str | None:
    """None when nvcc can compile here; otherwise the reason it cannot (ready for ``pytest.skip``).

    Note the polarity: a truthy result means *unavailable*.
    """
    nvcc = find_nvcc()
    if nvcc is None:
        return "nvcc not found (not on PATH, nor under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda)"
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{nvcc} --version failed: {exc}"
    if proc.returncode != 0:
        return f"{nvcc} --version exited with {proc.returncode}: {proc.stderr.strip()[:500]}"
    return None


def _cxx() -> str:
    return os.environ.get("CXX", "g++")


@functools.lru_cache(maxsize=8)
def _compiler_identity(cxx: str) -> str:
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelBuildError(
            f"C++ compiler {cxx!r} is not usable: {exc}", command=[cxx, "--version"]
        ) from exc
    if proc.returncode != 0:
        raise KernelBuildError(
            f"C++ compiler {cxx!r} --version exited with {proc.returncode}",
            command=[cxx, "--version"],
            stderr=proc.stderr,
        )
    return proc.stdout.splitlines()[0] if proc.stdout else cxx


def _headers() -> list[Path]:
    """Every header under kernels/: a .cuh that a launcher includes must invalidate the cache too."""
    kernels = find_kernels_dir()
    return sorted(p for p in kernels.rglob("*") if p.is_file() and p.suffix in _HEADER_SUFFIXES)


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def _include_flags() -> list[str]:
    kernels = find_kernels_dir()
    return [f"-I{kernels / 'include'}", f"-I{kernels}"]


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelBuildError(f"{what} failed: {exc}\ncommand: {' '.join(cmd)}", command=cmd) from exc
    if proc.returncode != 0:
        raise KernelBuildError(
            f"{what} failed (exit {proc.returncode})\ncommand: {' '.join(cmd)}\n{proc.stderr.strip()}",
            command=cmd,
            stderr=proc.stderr,
        )


def _prune(final: Path, stem: str) -> None:
    """Removes old builds `<stem>-<hash><suffix>` beside `final` beyond the newest few."""
    now = time.time()
    try:
        others = [p for p in final.parent.glob(f"{stem}-*{final.suffix}") if p != final]
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[_KEEP_VERSIONS - 1 :]:
            if now - old.stat().st_mtime > _PRUNE_AGE_S:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # pruning is housekeeping only


def _atomic_output(final: Path, stem: str, produce) -> Path:
    """Runs produce(tmp_path) unless `final` exists, then renames tmp_path to `final`."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        produce(tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    _prune(final, stem)
    return final


def _compile_object(source: Path, cxx: str, flags: Sequence[str], common: bytes) -> Path:
    key = _digest([common, str(source).encode(), source.read_bytes()])
    obj = build_dir() / "obj" / f"{source.stem}-{key}.o"

    def produce(tmp: Path) -> None:
        _run([cxx, *flags, *_include_flags(), "-c", str(source), "-o", str(tmp)], f"compiling {source}")

    return _atomic_output(obj, source.stem, produce)


def runtime_sources() -> list[Path]:
    """The emulation runtime's sources, resolved: what every emulation library links."""
    emu = find_kernels_dir() / "emu"
    return [(emu / name).resolve() for name in RUNTIME_SOURCES]


def build_emulation_library(
    sources: Sequence[Path | str], name: str, extra_flags: Sequence[str] = ()
) -> Path:
    """Compiles `sources` (+ the emulation runtime's RUNTIME_SOURCES) with
    ``g++ -std=c++20 -O2 -fPIC -DDDK_EMULATE`` into ``build_dir()/<name>-<hash>.so`` and returns its path,
    reusing an identical earlier build.

    `extra_flags` go to every compile and to the link (e.g. ``("-g", "-fsanitize=address")``). The C++
    compiler is $CXX, else g++. Raises KernelBuildError, carrying the compiler's stderr, on failure.
    """
    if not _NAME.match(name):
        raise ValueError(f"library name {name!r}: use letters, digits, '_', '.', '-'")
    paths = [Path(s).resolve() for s in sources]
    for p in paths:
        if not p.is_file():
            raise KernelBuildError(f"source file not found: {p}")
    paths += [source for source in runtime_sources() if source not in paths]

    cxx = _cxx()
    flags = [*COMPILE_FLAGS, *extra_flags]
    common = b"\0".join(
        [_compiler_identity(cxx).encode(), cxx.encode(), "\0".join(flags).encode()]
        + [str(h).encode() + b"\0" + h.read_bytes() for h in _headers()]
    )
    workers = max(1, min(len(paths), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        objects = list(pool.map(lambda src: _compile_object(src, cxx, flags, common), paths))

    link = [*LINK_FLAGS, *extra_flags]
    key = _digest([common, "\0".join(link).encode(), *(o.name.encode() for o in objects)])
    library = build_dir() / f"{name}-{key}.so"

    def produce(tmp: Path) -> None:
        _run([cxx, *link, *map(str, objects), "-o", str(tmp)], f"linking {library.name}")

    return _atomic_output(library, name, produce)

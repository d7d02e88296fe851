"""What the counter and sanitizer tests share: the probe library's traced entry points, and an independent
Python statement of the shared-memory wavefront rule (docs/emulation.md) to check the runtime against.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np

from ddbench.counters import LaunchCounters, parse_counters
from ddbench.kernel.build import build_emulation_library, find_kernels_dir
from ddbench.kernel.sanitizer import SanitizerReport, parse_sanitizer_report

PROBES = find_kernels_dir() / "emu" / "probes.cpp"
ERR_LEN = 4096
COUNT, SANITIZE, GROUP = 1, 2, 4

_out = ctypes.POINTER(ctypes.c_void_p)
_TAIL = [_out, _out, ctypes.c_char_p, ctypes.c_int]
_SIGNATURES = {
    "ddk_probe_smem": [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_int],
    "ddk_probe_ldm": [ctypes.c_void_p, ctypes.c_int, ctypes.c_int],
    "ddk_probe_global": [ctypes.c_void_p] * 3
    + [ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
    + [ctypes.c_int] * 2,
    "ddk_probe_phases": [ctypes.c_void_p, ctypes.c_uint, ctypes.c_int],
    "ddk_probe_cp_traced": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int],
    "ddk_probe_cluster": [ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
    + [ctypes.c_void_p] * 2
    + [ctypes.c_int] * 2,
    "ddk_probe_sanitize": [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
    ],
}


def site_line(name: str) -> int:
    for number, line in enumerate(PROBES.read_text().splitlines(), start=1):
        if f"SITE:{name}" in line:
            return number
    raise AssertionError(f"no SITE:{name} marker in {PROBES}")


class TracedProbes:
    """The probe library; each call returns (counters, sanitizer report) parsed into the typed records."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        for name, args in _SIGNATURES.items():
            getattr(self.lib, name).argtypes = [*args, *_TAIL]
            getattr(self.lib, name).restype = ctypes.c_int
        self.lib.ddk_probe_free.argtypes = [ctypes.c_void_p]
        self.lib.ddk_probe_free.restype = None

    def call(self, name: str, *args) -> tuple[LaunchCounters | None, SanitizerReport | None]:
        counters, findings = ctypes.c_void_p(), ctypes.c_void_p()
        err = ctypes.create_string_buffer(ERR_LEN)
        rc = getattr(self.lib, name)(*args, ctypes.byref(counters), ctypes.byref(findings), err, ERR_LEN)
        texts = []
        for handle in (counters, findings):
            texts.append(ctypes.string_at(handle.value).decode() if handle.value else None)
            if handle.value:
                self.lib.ddk_probe_free(handle)
        assert rc == 0, err.value.decode()
        return (
            parse_counters(json.loads(texts[0])) if texts[0] else None,
            parse_sanitizer_report(json.loads(texts[1])) if texts[1] else None,
        )


def build_probes() -> TracedProbes:
    return TracedProbes(build_emulation_library([PROBES], "emu-probes"))


def aligned(n: int, dtype, align: int = 128) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(n * itemsize + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + n * itemsize].view(dtype)


def as_i32(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.int32))


# --------------------------------------------------------- the wavefront rule, stated independently --


def expected_wavefronts(offsets: list[int], width: int, active: int = 0xFFFFFFFF) -> int:
    """32 banks x 4 bytes; the warp, half-warps (8 B) or quarter-warps (16 B) are served separately; in each,
    the cost is the most distinct 4-byte words any one bank must deliver (same word: broadcast)."""
    group = 32 if width <= 4 else 16 if width == 8 else 8
    total = 0
    for start in range(0, 32, group):
        words_by_bank: dict[int, set[int]] = {}
        for lane in range(start, start + group):
            if not active >> lane & 1:
                continue
            first = offsets[lane] // 4
            for word in range(first, first + max(1, width // 4)):
                words_by_bank.setdefault(word % 32, set()).add(word)
        if words_by_bank:
            total += max(len(w) for w in words_by_bank.values())
    return total


def expected_ldmatrix_wavefronts(row_offsets: list[int], matrices: int) -> int:
    """Each 8x8 matrix is one phase: its 8 rows of 16 bytes, from lanes 8i..8i+7."""
    total = 0
    for m in range(matrices):
        words_by_bank: dict[int, set[int]] = {}
        for lane in range(8 * m, 8 * m + 8):
            for word in range(row_offsets[lane] // 4, row_offsets[lane] // 4 + 4):
                words_by_bank.setdefault(word % 32, set()).add(word)
        total += max(len(w) for w in words_by_bank.values())
    return total

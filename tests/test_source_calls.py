"""Where an anchor's primitive can have been counted, from the kernel's source
(ddbench/kernel/source_calls.py), and the SASS count that pools an anchor nvcc's line table misplaced with
those sites."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddbench.kernel.sass_map import ENDS, EXACT, Anchor, Block, KernelSass
from ddbench.kernel.source_calls import PRIMITIVE_KINDS, UNCOUNTED, parse_source
from ddbench.model.sass_count import count_cta

KERNELS = Path(__file__).resolve().parents[1] / "kernels"

SOURCE = """\
#define DDK_DEVICE
// a comment that calls helper( and opens {
DDK_DEVICE float helper(float v) {
  const char* s = "not a call(";
  return ddk::shfl_xor(v, 1);
}
DDK_DEVICE int declared(int x);
template <int kN>
DDK_DEVICE void twice(float* out, float v) { ddk::st_global(out, helper(v)); }
DDK_DEVICE void caller(float* out, float v) {
  float w = v * 2.f;
  w += 1.f;
  w -= 3.f;
  float u = helper(w);
  twice<3>(out, u);
  ddk::sync_block();
  out[0] = w;
  w *= 5.f;
  w *= 6.f;
  w *= 7.f;
  ddk::st_global(out + 1, w);
}
DDK_GLOBAL DDK_LAUNCH_BOUNDS(256, 1) void kernel_of(float* out) {
  caller(out, 1.f);
}
"""


def test_functions_are_found_with_their_bodies_and_calls():
    calls = parse_source(SOURCE)
    assert [(name, first, last) for name, first, last in calls.bodies] == [
        ("helper", 3, 6),
        ("twice", 9, 9),  # the template line above is not its body
        ("caller", 10, 22),
        ("kernel_of", 23, 25),  # a launch-bounds macro's parentheses are not the name
    ]
    # no call in a comment or a string; a template argument list before the call's parenthesis
    assert dict(calls.calls) == {9: ("helper",), 14: ("helper",), 15: ("twice",), 24: ("caller",)}  # not 3
    kinds = {5: ("shfl",), 9: ("st_global",), 16: ("sync_block",), 21: ("st_global",)}
    assert dict(calls.primitives) == kinds


def test_an_anchor_counts_where_its_statement_its_callees_or_its_function_issue_its_primitive():
    calls = parse_source(SOURCE)
    assert calls.sites(16, "sync_block") == (16,)  # its own line
    assert calls.sites(5, "shfl") == (5,)
    # a shuffle named at the line that calls helper (out of line, nvcc may keep only the outer frame)
    assert calls.sites(14, "shfl") == (5,)
    # a store named at a statement that calls none (hoisted): it may be any its function reaches
    assert calls.sites(12, "st_global") == ()
    assert calls.function_sites("caller", "st_global") == (9, 21)
    assert calls.function_sites("caller", "mma") == ()
    # the function whose code most lines are: not the helper it inlined, nor the kernel that calls it
    assert calls.function_of([(5, 4), (11, 2), (13, 2)]) == "caller"


def test_every_counted_primitive_of_the_ddk_header_has_its_kinds():
    header = (KERNELS / "include" / "ddk" / "primitives.h").read_text()
    # any return type (const T*, std::uint32_t, ...): the name before the parameter list that takes a Site
    sited = set(re.findall(r"DDK_DEVICE\s+[^;{(]*?\b(\w+)\([^;{]*?Site site", header))
    assert sited, "the header's primitives take a Site"
    assert sited - UNCOUNTED == set(PRIMITIVE_KINDS)


def shfl(line: int) -> Anchor:
    return Anchor(f"k.cuh:{line}", ("shfl",), False)


def test_a_shuffle_named_at_its_helpers_call_counts_with_the_helpers_site():
    # block 1 holds helper's shuffle inlined with its chain (line 5); block 2 the one nvcc named at the
    # caller's line 14. The emulation counted 2 warps x 2 calls at line 5.
    blocks = (
        Block(1, (1,), EXACT),
        Block(10, (2,), EXACT, (shfl(5),)),
        Block(10, (3,), EXACT, (shfl(14),)),
        Block(1, (), ENDS),
    )
    sites = {"k.cuh:5": {"shfl": 4}}
    blind = count_cta(KernelSass("verify", blocks, ()), sites, threads=64)
    assert blind.mismatch == pytest.approx(4, abs=1e-6)  # line 14 held to 0 and line 5 to 4: both missed
    known = KernelSass("verify", blocks, (), source=(("k.cuh", parse_source(SOURCE)),))
    seen = count_cta(known, sites, threads=64)
    assert seen.mismatch == pytest.approx(0, abs=1e-6)
    assert seen.least == seen.most == pytest.approx(2 * 22, rel=1e-5)


def test_the_real_kernel_source_places_its_merges_helpers():
    calls = parse_source((KERNELS / "verify" / "verify_attn.cuh").read_text())
    names = {name for name, _, _ in calls.bodies}
    assert {"warp_max", "add_part_of_lane", "merge_cluster_parts", "verify_attention_kernel"} <= names
    (warp_max,) = [(first, last) for name, first, last in calls.bodies if name == "warp_max"]
    callers = [line for line, called in calls.calls if "warp_max" in called]
    assert callers and all(calls.sites(line, "shfl") for line in callers)
    assert all(warp_max[0] <= s <= warp_max[1] for line in callers for s in calls.sites(line, "shfl"))


def test_an_out_of_line_functions_store_counts_with_its_functions_stores():
    """nvcc named the store at line 12, which issues none; the emulation counted it at line 21. In an
    out-of-line function (a subroutine of the SASS) it counts with every store its function reaches; inlined,
    it stays held to line 12's count, 0, as before."""
    store = (Anchor("k.cuh:12", ("st_global",), False),)
    sites = {"k.cuh:21": {"st_global": 2}}
    source = (("k.cuh", parse_source(SOURCE)),)
    out_of_line = (
        Block(1, (1,), EXACT, calls=(2,)),
        Block(1, (), ENDS),
        Block(10, (), ENDS, store, lines=(("k.cuh:12", 10),)),
    )
    seen = count_cta(KernelSass("verify", out_of_line, (2,), source=source), sites, threads=64)
    assert seen.mismatch == pytest.approx(0, abs=1e-6) and seen.likely == pytest.approx(2 * 12, rel=1e-5)
    inlined = (Block(1, (1,), EXACT), Block(10, (2,), EXACT, store), Block(1, (), ENDS))
    held = count_cta(KernelSass("verify", inlined, (), source=source), sites, threads=64)
    assert held.mismatch == pytest.approx(2, abs=1e-6)

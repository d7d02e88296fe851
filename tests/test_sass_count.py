"""The SASS map (nvdisasm -gi as basic blocks) and the count of a CTA's SASS instructions solved from it and
the emulation's per-site counts: hand-written listings and blocks with known answers, then the real kernel
where nvcc is installed."""

from __future__ import annotations

import pytest

from ddbench.counters import parse_counters
from ddbench.errors import InputError
from ddbench.gpus import gpu_spec
from ddbench.kernel.sass_map import DIVERGES, ENDS, EXACT, Anchor, Block, KernelSass, parse_sass
from ddbench.model.sass_count import UNPINNED_LOOP_TRIPS, count_cta
from ddbench.model.warp_instructions import with_issue_count


def approx(value):
    """The solver keeps each objective it settles within a relative 1e-6 for the next."""
    return pytest.approx(value, rel=1e-5, abs=1e-4)


HEADER = (
    "//--------------------- .text._ZN10ddk_verify23verify_attention_kernelENS_12VerifyParamsE ----------"
)
LISTING = f"""
\t.target\tsm_120
{HEADER}
_ZN10ddk_verify23verify_attention_kernelENS_12VerifyParamsE:
\t//## File "/k/verify_attn.cuh", line 10
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   ISETP.GE.AND P0, PT, R0, 0x40, PT ;
        /*0020*/                   BSSY.RECONVERGENT B0, `(.L_x_1) ;
        /*0030*/               @P0 BRA `(.L_x_2) ;
\t//## File "/k/primitives.h", line 437 inlined at "/k/verify_attn.cuh", line 12
\t//## File "/k/verify_attn.cuh", line 12 inlined at "/k/verify_attn.cuh", line 30
\t//## File "/k/verify_attn.cuh", line 30
        /*0040*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
\t//## File "/k/verify_attn.cuh", line 31
        /*0050*/              @!P1 STS [R2], R4 ;
        /*0058*/              @!PT LDS RZ, [RZ] ;
        /*0060*/                   CALL.REL.NOINC `($__internal_0_$__cuda_sm20_div_s64) ;
.L_x_2:
        /*0070*/                   BSYNC.RECONVERGENT B0 ;
.L_x_1:
        /*0080*/                   BRA.U !UP0, `(.L_x_3) ;
        /*0090*/                   EXIT ;
.L_x_3:
        /*00a0*/                   EXIT ;
$__internal_0_$__cuda_sm20_div_s64:
        /*00b0*/                   IMAD R0, R0, R1, RZ ;
        /*00c0*/                   RET.REL.NODEC R20 `(_ZN10ddk_verify23verify_attention_kernelE) ;
"""


def test_a_listing_becomes_blocks_with_their_flow_anchors_and_calls():
    (kernel,) = parse_sass(LISTING, {"verify_attn.cuh": ""}).values()
    assert kernel.name == "verify"
    assert [b.instructions for b in kernel.blocks] == [4, 4, 1, 1, 1, 1, 2]
    entry, arm, sync, uniform, exit_, _, slow = kernel.blocks
    assert (entry.successors, entry.leaves) == ((2, 1), DIVERGES)  # taken first, then the fall-through
    assert (arm.successors, arm.leaves, arm.calls) == ((2,), EXACT, (6,))
    # the innermost line of the kernel's own source names the call site, whatever inlined it; an @!PT
    # instruction never runs and anchors nothing
    assert arm.anchors == (
        Anchor("verify_attn.cuh:12", ("mma",), False),
        Anchor("verify_attn.cuh:31", ("st_shared",), True),
    )
    assert sync.reconverges == 0  # BSYNC B0 lets out the warps that entered at BSSY B0
    assert (uniform.successors, uniform.leaves) == ((5, 4), EXACT)  # a uniform predicate: no divergence
    assert (exit_.leaves, exit_.successors, slow.leaves) == (ENDS, (), ENDS)
    assert kernel.slow_paths == (6,) and kernel.subroutines == (6,)


def test_a_listing_without_the_kernels_or_with_a_dangling_branch_is_refused():
    with pytest.raises(InputError, match="no verify or combine kernel"):
        parse_sass("\t.target\tsm_120\n", {"verify_attn.cuh": ""})
    broken = f"{HEADER}\n        /*0000*/                   BRA `(.L_x_9) ;\n"
    with pytest.raises(InputError, match=r"\.L_x_9"):
        parse_sass(broken, {"verify_attn.cuh": ""})
    indirect = f"{HEADER}\n        /*0000*/                   BRX R2 -0x10 ;\n"
    with pytest.raises(InputError, match="BRX R2 -0x10: an indirect jump"):
        parse_sass(indirect, {"verify_attn.cuh": ""})


def mma(site: int, predicated: bool = False) -> Anchor:
    return Anchor(f"k.cuh:{site}", ("mma",), predicated)


def kernel_of(*blocks: Block, slow_paths: tuple[int, ...] = ()) -> KernelSass:
    return KernelSass("verify", blocks, (), slow_paths)


def test_straight_code_runs_once_a_warp():
    k = kernel_of(Block(10, (1,), EXACT), Block(5, (), ENDS))
    c = count_cta(k, {}, threads=256)
    assert c.least == c.most == c.likely == approx(8 * 15) and c.mismatch == 0


def test_a_loop_runs_as_often_as_its_anchor_was_counted():
    # 0 -> 1 (loop body, back to itself) -> 2
    k = kernel_of(Block(3, (1,), EXACT), Block(20, (1, 2), DIVERGES, (mma(7),)), Block(2, (), ENDS))
    c = count_cta(k, {"k.cuh:7": {"mma": 4 * 40}}, threads=128)  # 4 warps x 40 passes
    n = 4 * 3 + 160 * 20 + 4 * 2
    assert (c.least, c.most) == approx((n, n)) and c.mismatch == 0


def test_a_branch_around_arithmetic_alone_is_bounded_and_the_likely_figure_is_its_middle():
    # 0 -> (1: 50 instructions, no anchor) -> 2, or 0 -> 2
    k = kernel_of(Block(4, (1, 2), DIVERGES), Block(50, (2,), EXACT), Block(1, (), ENDS))
    c = count_cta(k, {}, threads=32)
    assert (c.least, c.most, c.likely) == approx((5, 55, 30))


def test_counted_arms_diverge_only_as_far_as_the_counts_demand():
    # 0 -> 1 (anchor a) or 2 (anchor b) -> 3; 4 warps, a ran 3 times and b twice: one warp split
    k = kernel_of(
        Block(2, (1, 2), DIVERGES),
        Block(10, (3,), EXACT, (mma(1),)),
        Block(10, (3,), EXACT, (mma(5),)),
        Block(1, (), ENDS),
    )
    c = count_cta(k, {"k.cuh:1": {"mma": 3}, "k.cuh:5": {"mma": 2}}, threads=128)
    assert (c.least, c.most) == approx((4 * 2 + 5 * 10 + 5 * 1, 4 * 2 + 5 * 10 + 5 * 1)) and c.mismatch == 0


def test_a_loop_no_anchor_pins_runs_at_most_its_bound():
    k = kernel_of(Block(1, (1,), EXACT), Block(10, (1, 2), DIVERGES), Block(1, (), ENDS))
    c = count_cta(k, {}, threads=32)
    assert c.least == approx(12) and c.most == approx(2 + 10 * UNPINNED_LOOP_TRIPS)
    assert c.likely == approx(12)  # at its fewest trips


def test_a_predicated_anchor_bounds_its_block_from_below_only():
    # the anchored block may run where no lane called the primitive, never less often than it was called
    k = kernel_of(
        Block(2, (1, 2), DIVERGES), Block(10, (2,), EXACT, (mma(3, predicated=True),)), Block(1, (), ENDS)
    )
    c = count_cta(k, {"k.cuh:3": {"mma": 1}}, threads=64)
    assert (c.least, c.most) == approx((2 * 2 + 10 + 2, 2 * 2 + 20 + 2))


def test_anchors_the_flow_cannot_honour_are_reported_as_mismatch():
    k = kernel_of(Block(5, (), ENDS, (mma(1),)))
    c = count_cta(k, {"k.cuh:1": {"mma": 3}}, threads=32)  # one warp cannot run its only block 3 times
    assert c.mismatch == approx(2) and c.least == c.most == approx(5)


def test_sites_a_line_or_two_apart_count_together():
    # one call over two lines: the host compiler's site on line 8, nvcc's on line 9
    k = kernel_of(Block(3, (1, 2), DIVERGES), Block(7, (2,), EXACT, (mma(9),)), Block(1, (), ENDS))
    c = count_cta(k, {"k.cuh:8": {"mma": 1}}, threads=32)
    assert (c.least, c.most) == approx((11, 11)) and c.mismatch == 0


def test_warps_that_stop_inside_a_reconverging_region_are_not_let_out_by_its_bsync():
    # 0 opens a region (BSSY) and branches to 1 (@P0 EXIT, else on) or 2 (its BSYNC); 3 runs after it
    k = kernel_of(
        Block(1, (1, 2), DIVERGES),
        Block(1, (2,), ENDS),
        Block(1, (3,), EXACT, reconverges=0),
        Block(100, (), ENDS, (mma(9),)),
    )
    c = count_cta(k, {"k.cuh:9": {}}, threads=32)  # block 3's mma never ran: every warp stopped at 1
    assert c.least < 5 and c.most < 100


def test_a_loop_pinned_only_by_an_anchor_the_counts_leave_out_stays_bounded():
    # the loop's mma site ran only as a shfl (the SASS and the emulation disagree): the loop is unpinned
    k = kernel_of(Block(1, (1,), EXACT), Block(10, (1, 2), DIVERGES, (mma(7),)), Block(1, (), ENDS))
    c = count_cta(k, {"k.cuh:7": {"shfl": 5}, "<many sites>": {"mma": 3}}, threads=32)
    assert c.most == approx(2 + 10 * UNPINNED_LOOP_TRIPS)


def test_the_likely_figure_leaves_out_the_compilers_slow_paths():
    # 0 calls the slow path from block 1 on a branch no anchor pins
    k = kernel_of(
        Block(2, (1, 2), DIVERGES),
        Block(1, (2,), EXACT, calls=(3,)),
        Block(1, (), ENDS),
        Block(80, (), ENDS),
        slow_paths=(3,),
    )
    c = count_cta(k, {}, threads=32)
    assert (c.least, c.most, c.likely) == approx((3, 84, 3))


def counters_with(sites: dict | None, instructions: int = 10) -> dict:
    shape = {
        "count": 2,
        "global_bytes": 0,
        "phases": [
            {
                "mma": 0,
                "shared_wavefronts": 0,
                "global_bytes": 0,
                "shuffles": 0,
                "warp_instructions": instructions,
            }
        ],
    }
    if sites is not None:
        shape["sites"] = sites
    return {
        "kernels": [
            {
                "name": "verify",
                "threads_per_cta": 64,
                "ctas": 2,
                "dynamic_smem_bytes": 0,
                "totals": {
                    "global": {"sectors": 0, "unique_sectors": 0},
                    "shared": {"instructions": {}, "wavefronts": {}, "bank_conflicts": 0},
                },
                "cta_shapes": [shape],
            }
        ]
    }


def test_the_issue_term_counts_the_sass_where_a_map_and_sites_are_given_else_the_ratio():
    gpu = gpu_spec("rtx-pro-6000")
    sass = {"verify": kernel_of(Block(40, (), ENDS, (mma(1),)))}
    (kernel,) = parse_counters(counters_with({"k.cuh:1": {"mma": 2}})).kernels
    scaled, issue = with_issue_count(kernel, gpu, sass)
    assert issue.method == "sass" and issue.likely == approx(2 * 2 * 40)  # 2 CTAs x 2 warps x 40
    assert scaled.cta_shapes[0].phases[0].warp_instructions == 80  # this CTA shape's 10 counted -> 80 issued
    (old,) = parse_counters(counters_with(None)).kernels
    _, issue = with_issue_count(old, gpu, sass)
    assert issue.method == "ratio" and issue.likely == approx(20 * gpu.verify_instructions_per_counted)


def test_a_flow_that_cannot_be_solved_falls_back_to_the_ratio_and_says_why(monkeypatch):
    import ddbench.model.warp_instructions as wi

    def unsolvable(*_):
        raise InputError("the SASS flow has no solution for these counts: infeasible")

    monkeypatch.setattr(wi, "count_cta", unsolvable)
    monkeypatch.setattr(wi, "_SOLVED", {})
    (kernel,) = parse_counters(counters_with({"k.cuh:1": {"mma": 2}})).kernels
    _, issue = with_issue_count(kernel, gpu_spec("h200"), {"verify": kernel_of(Block(4, (), ENDS))})
    assert issue.method == "ratio" and "infeasible" in issue.why


def test_sites_of_a_bad_kind_or_count_name_their_path():
    with pytest.raises(InputError) as err:
        parse_counters(counters_with({"k.cuh:1": {"mma": -1}}))
    assert "sites" in str(err.value.path)
    with pytest.raises(InputError):
        parse_counters(counters_with({"k.cuh:1": 3}))
    with pytest.raises(InputError, match="unknown instruction kind 'hmma'"):
        parse_counters(counters_with({"k.cuh:1": {"hmma": 3}}))


@pytest.fixture(scope="module")
def built():
    from ddbench.kernel.build import nvcc_available
    from ddbench.kernel.kernel_check import find_cuobjdump, kernel_check

    if (why := nvcc_available()) is not None:
        pytest.skip(f"unavailable: {why}")
    if (why := find_cuobjdump()[2]) is not None:
        pytest.skip(f"unavailable: {why}")
    return kernel_check(("sm_120",))[0]


def test_the_real_kernels_sass_ties_to_the_emulations_sites(built):
    """Every HMMA of the verify kernel is the mma of a kernel-source line that calls it (through the inlined
    chain), and an emulated launch's counts solve with little mismatch."""
    from pathlib import Path

    from ddbench.backends.cuda_emu import CudaEmuBackend
    from ddbench.inputs import generate_inputs
    from ddbench.suite import parse_suite

    verify = built.sass_map["verify"]
    source = (Path(__file__).resolve().parents[1] / "kernels" / "verify" / "verify_attn.cuh").read_text()
    lines = source.splitlines()
    hmma = [a for b in verify.blocks for a in b.anchors if a.kinds == ("mma",)]
    assert len(hmma) == 68  # 36 for S (4 n-tiles x 9 k-steps), 32 for P.V (16 n-tiles x 2 k-steps)
    for a in hmma:
        line = int(a.site.split(":")[1])
        assert "mma_bf16_m16n8k16" in " ".join(lines[line - 3 : line]), a.site
    suite = parse_suite(
        {
            "name": "s",
            "cases": [
                {
                    "label": "c",
                    "model": "kimi-k2.6",
                    "layout": {"tp": 8},
                    "batch_size": 1,
                    "prefix": 300,
                    "tree": {"kind": "ddtree", "budget": 8},
                }
            ],
        },
        "inline",
    )
    x = generate_inputs(suite.cases[0])
    counters = CudaEmuBackend(workers=1).run_traced(x, counters=True, group_shapes=True).counters
    kernel = counters.kernel("verify")
    for shape in kernel.cta_shapes:
        c = count_cta(verify, shape.sites, kernel.threads_per_cta)
        assert c.least <= c.likely <= c.most
        # what the flow cannot honour is plain accesses the compiler merged, split or moved between lines
        assert c.mismatch <= 0.1 * sum(n for ops in shape.sites.values() for n in ops.values())

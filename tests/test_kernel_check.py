"""`ddbench kernel-check` (ddbench/kernel/kernel_check.py, resources.py): nvcc builds the verify kernels for
sm_120 and sm_90; ptxas' resource report and the SASS are checked.

The parsers run on ptxas / cuobjdump output written out here by hand (copied from the shape of real nvcc 13
output), the limits on synthetic reports, and the real build wherever nvcc is installed. The launch constants
the host uses (ddbench/kernel/plan.py) are checked against the constexprs of the kernel source itself.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess

import pytest
from click.testing import CliRunner

import ddbench.kernel.kernel_check as kc
from ddbench.cli.main import cli
from ddbench.kernel import plan
from ddbench.kernel.build import find_kernels_dir, find_nvcc, nvcc_available
from ddbench.kernel.marshal import MASK_WORD_BITS
from ddbench.kernel.resources import (
    REGISTER_LIMIT,
    SMEM_LIMIT_BYTES,
    KernelResources,
    parse_resource_usage,
    sass_census,
    violations,
)
from ddbench.mla import HEAD_DIM_QK, HEAD_DIM_V

KERNEL_SOURCE = find_kernels_dir() / "verify" / "verify_attn.cuh"
VERIFY = "verify_attention_kernel"
COMBINE = "combine_parts_kernel"

needs_nvcc = pytest.mark.skipif(nvcc_available() is not None, reason=str(nvcc_available()))


def cuobjdump_here() -> bool:
    return kc.find_cuobjdump()[0] is not None


# ---------------------------------------------------------------- canned tool output

VERIFY_MANGLED = "_ZN10ddk_verify23verify_attention_kernelENS_12VerifyParamsE"
COMBINE_MANGLED = "_ZN10ddk_verify20combine_parts_kernelENS_12VerifyParamsE"
PTXAS_REPORT = "\n".join(
    [
        "ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24",
        "ptxas info    : Overriding maximum register limit 256 for '_Z12spill_kernelPfi' with  24 of "
        "maxrregcount option",
        "ptxas info    : 0 bytes gmem",
        "ptxas info    : Compiling entry function '_Z12spill_kernelPfi' for 'sm_90'",
        "ptxas info    : Function properties for _Z12spill_kernelPfi",
        "    216 bytes stack frame, 236 bytes spill stores, 416 bytes spill loads",
        "ptxas info    : Used 24 registers, used 1 barriers, 216 bytes cumulative stack size, "
        "4096 bytes smem",
        "ptxas info    : Compile time = 36.789 ms",
        f"ptxas info    : Compiling entry function '{COMBINE_MANGLED}' for 'sm_120'",
        f"ptxas info    : Function properties for {COMBINE_MANGLED}",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 40 registers, used 0 barriers",
        "ptxas info    : Compile time = 42.183 ms",
        f"ptxas info    : Compiling entry function '{VERIFY_MANGLED}' for 'sm_120'",
        f"ptxas info    : Function properties for {VERIFY_MANGLED}",
        "    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 167 registers, used 1 barriers, 8 bytes cumulative stack size",
        "ptxas info    : Compile time = 251.418 ms",
        "",
    ]
)

SASS_LISTING = """\

\tcode for sm_120
\t.target\tsm_120

\t\tFunction : _ZN10ddk_verify23verify_attention_kernelENS_12VerifyParamsE
\t.headerflags\t@"EF_CUDA_SM120 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM120)"
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                     /* 0x0000df00ff017b82 */
                                                                               /* 0x000ff00000000800 */
        /*0050*/               @P0 EXIT ;                                      /* 0x000000000000094d */
                                                                               /* 0x000fea0003800000 */
        /*12c0*/                   LDGSTS.E.BYPASS.128.ZFILL [R5], desc[UR8][R2.64], P0 ; /* 0x00057fae */
        /*1560*/                   LDSM.16.M88.4 R12, [R0+UR5] ;               /* 0x00000005000c783b */
        /*1570*/                   LDSM.16.MT88.4 R16, [R2+UR5] ;              /* 0x000000050210783b */
        /*1580*/                   HMMA.16816.F32.BF16 R20, R12, R16, R20 ;    /* 0x000000100c14723c */
        /*1590*/                   HMMA.16816.F32.BF16 R24, R12, R18, R24 ;    /* 0x000000120c18723c */
        /*15a0*/              @!P1 HMMA.16816.F32.BF16 R28, R12, R18, R28 ;    /* 0x000000120c1c923c */
        /*15b0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ; /* 0x00000000041879f0 */
        /*15c0*/                   UTCHMMA gdesc[UR8], gdesc[UR10], tmem[UR12], idesc[UR15] ; /* 0x75ea */
        /*15d0*/                   FMUL R3, R3, 0.5 ;                          /* 0x3f00000003037820 */
        /*15e0*/                   HMMAX R3, R3 ;                              /* 0x0000000000000000 */
        /*15f0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;               /* 0x0000000000007b1d */
        /*1600*/                   EXIT ;                                      /* 0x000000000000794d */
"""

TMA_SASS = """\
        /*0180*/                   UTMALDG.2D [UR8], [UR4] ;                   /* 0x00000008040075b4 */
        /*0190*/                   SYNCS.ARRIVE.TRANS64 RZ, [UR6], RZ ;        /* 0x000000ffff0079a7 */
        /*01a0*/                   HMMA.16816.F32.BF16 R20, R12, R16, R20 ;    /* 0x000000100c14723c */
"""

TMA_KERNEL = r"""
#include <cstdint>
__global__ void tma_kernel(const __grid_constant__ uint64_t desc[16], float* out) {
  __shared__ alignas(128) float tile[32 * 32];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t smem = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint32_t mbar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(mbar));
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], 4096;" :: "r"(mbar));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem), "l"(desc), "r"(0), "r"(0), "r"(mbar) : "memory");
  }
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}
"""


def test_parse_resource_usage_on_a_ptxas_report():
    kernels = parse_resource_usage(PTXAS_REPORT)
    assert [(k.short_name, k.arch) for k in kernels] == [
        ("spill_kernel", "sm_90"),
        (COMBINE, "sm_120"),
        (VERIFY, "sm_120"),
    ]
    spill, combine, verify = kernels
    assert spill.name == "_Z12spill_kernelPfi"
    assert (spill.registers, spill.stack_bytes, spill.static_smem_bytes, spill.barriers) == (24, 216, 4096, 1)
    assert (spill.spill_store_bytes, spill.spill_load_bytes) == (236, 416)
    assert (combine.registers, combine.stack_bytes, combine.static_smem_bytes, combine.barriers) == (
        40,
        0,
        0,
        0,
    )
    assert (combine.spill_store_bytes, combine.spill_load_bytes) == (0, 0)
    assert verify.name == VERIFY_MANGLED
    assert (verify.registers, verify.stack_bytes, verify.barriers, verify.static_smem_bytes) == (167, 8, 1, 0)
    assert parse_resource_usage("ptxas info    : 0 bytes gmem\n") == []


CLEAN_FRAME = "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
# nvcc 13's order with out-of-line device functions: the kernel's frame, its "Used" line, then each callee's
# frame. The kernel spills here and its callees do not, or the other way round.
CALLEE_REPORT = "\n".join(
    [
        f"ptxas info    : Compiling entry function '{VERIFY_MANGLED}' for 'sm_120'",
        f"ptxas info    : Function properties for {VERIFY_MANGLED}",
        "    8 bytes stack frame, 8 bytes spill stores, 16 bytes spill loads",
        "ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size",
        "ptxas info    : Compile time = 363.965 ms",
        "ptxas info    : Function properties for _ZN10ddk_verify18arrive_at_row_tileENS_12VerifyParamsE",
        "    {callee}",
        "ptxas info    : Function properties for _ZN10ddk_verify19merge_cluster_partsENS_12VerifyParamsE",
        f"    {CLEAN_FRAME}",
    ]
)


def test_a_callees_frame_does_not_hide_the_kernels_spill():
    (verify,) = parse_resource_usage(CALLEE_REPORT.format(callee=CLEAN_FRAME))
    assert (verify.stack_bytes, verify.spill_store_bytes, verify.spill_load_bytes) == (8, 8, 16)
    assert verify.callee_spills == {}
    assert violations(verify, 0) == ["spills 8 B stored, 16 B loaded"]


def test_each_kernel_keeps_its_own_frame_with_callees_between():
    """nvcc 13 lists the combine kernel, then the verify kernel and its callees: a new entry takes the frame
    lines that follow its own "Function properties" line, not the previous kernel's callees'."""
    combine_first = "\n".join(
        [
            f"ptxas info    : Compiling entry function '{COMBINE_MANGLED}' for 'sm_120'",
            f"ptxas info    : Function properties for {COMBINE_MANGLED}",
            "    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads",
            "ptxas info    : Used 90 registers, used 1 barriers",
            CALLEE_REPORT.format(callee=CLEAN_FRAME),
        ]
    )
    combine, verify = parse_resource_usage(combine_first)
    assert (combine.spill_store_bytes, combine.spill_load_bytes, combine.callee_spills) == (4, 4, {})
    assert (verify.spill_store_bytes, verify.spill_load_bytes, verify.callee_spills) == (8, 16, {})


def test_a_callees_spill_is_a_violation():
    clean = "0 bytes spill stores, 0 bytes spill loads"
    report = CALLEE_REPORT.replace("8 bytes spill stores, 16 bytes spill loads", clean)
    (verify,) = parse_resource_usage(
        report.format(callee="16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads")
    )
    assert (verify.spill_store_bytes, verify.spill_load_bytes) == (0, 0)
    assert violations(verify, 0) == [
        "its out-of-line _ZN10ddk_verify18arrive_at_row_tileENS_12VerifyParamsE spills 4 B stored, 4 B loaded"
    ]


def test_violations_on_synthetic_reports():
    clean = KernelResources(VERIFY, "sm_120", registers=REGISTER_LIMIT, static_smem_bytes=0)
    assert violations(clean, plan.MAX_SMEM_BYTES) == []
    assert violations(clean, SMEM_LIMIT_BYTES) == []  # exactly 99 KB is allowed

    spills = KernelResources(VERIFY, "sm_120", registers=128, spill_store_bytes=8, spill_load_bytes=16)
    assert violations(spills, 0) == ["spills 8 B stored, 16 B loaded"]
    assert len(violations(KernelResources(VERIFY, "sm_90", spill_load_bytes=4), 0)) == 1

    assert violations(KernelResources(VERIFY, "sm_120", registers=256), 0) == ["256 registers > 255"]

    smem = KernelResources(VERIFY, "sm_120", registers=96, static_smem_bytes=16_384)
    assert violations(smem, plan.MAX_SMEM_BYTES) == [f"{16_384 + 100_544} B of shared memory > 101376"]
    assert violations(smem, 0) == []
    assert violations(KernelResources(VERIFY, "sm_120"), SMEM_LIMIT_BYTES + 1) == [
        "101377 B of shared memory > 101376"
    ]

    everything = KernelResources(
        VERIFY, "sm_90", registers=300, spill_store_bytes=4, static_smem_bytes=200_000
    )
    assert len(violations(everything, 0)) == 3


def test_sass_census_counts_opcodes_and_names_forbidden_ones():
    census = sass_census(SASS_LISTING)
    assert census.count("HMMA") == 3  # predicated ones too; HMMAX is another instruction
    assert census.opcodes["HMMA.16816.F32.BF16"] == 3
    assert census.count("HMMAX") == 1
    assert census.count("LDSM") == 2 and census.count("LDGSTS") == 1
    assert census.count("EXIT") == 2  # "@P0 EXIT" and "EXIT"
    assert census.count("BAR") == 1
    # (the opcode pattern stops at the lower-case "x" of the shape: HGMMA.64x128x16 is listed as HGMMA.64)
    assert [op.split(".")[0] for op in census.forbidden] == ["HGMMA", "UTCHMMA"]
    # the encoding comments are not instructions
    assert sum(census.opcodes.values()) == 14

    allowed = sass_census(SASS_LISTING.replace("HGMMA", "FMUL").replace("UTCHMMA", "NOP"))
    assert allowed.forbidden == []
    assert sass_census("").count("HMMA") == 0


def test_tma_is_not_forbidden_on_sm_120(tmp_path):
    listing = TMA_SASS
    tool, env, _ = kc.find_cuobjdump()
    if nvcc_available() is None and tool is not None:
        source, cubin = tmp_path / "tma.cu", tmp_path / "tma.cubin"
        source.write_text(TMA_KERNEL)
        built = subprocess.run(
            [str(find_nvcc()), "-cubin", "-arch=sm_120", "-o", str(cubin), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if built.returncode != 0:
            pytest.skip(f"nvcc does not build TMA for sm_120 here: {built.stderr[-500:]}")
        listing = subprocess.run([*tool, "-sass", str(cubin)], capture_output=True, text=True, env=env).stdout
    census = sass_census(listing)
    if census.count("UTMALDG") == 0:
        pytest.skip("no UTMALDG in the listing")
    assert census.forbidden == []


# ---------------------------------------------------------------- host constants == kernel constexprs


def cuh_constants(text: str) -> dict[str, int]:
    """`constexpr int kName = <expression>;` of the kernel source, each expression evaluated from the
    integer literals and earlier constants (only + - * / and parentheses)."""
    values: dict[str, int] = {}

    def evaluate(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.BinOp):
            a, b = evaluate(node.left), evaluate(node.right)
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if type(node.op) in ops:
                return ops[type(node.op)]
            if isinstance(node.op, ast.Div):
                return int(a / b)  # C++ integer division (all operands are positive here)
        raise ValueError(f"cannot evaluate {ast.dump(node)}")

    for name, expression in re.findall(r"constexpr\s+int\s+(\w+)\s*=\s*([^;]+);", text):
        values[name] = evaluate(ast.parse(expression.replace("'", ""), mode="eval").body)
    return values


def test_plan_constants_agree_with_the_kernel_source():
    c = cuh_constants(KERNEL_SOURCE.read_text())
    assert c["kDimQK"] == HEAD_DIM_QK == 576 and c["kDimV"] == HEAD_DIM_V == 512
    assert c["kGroupRows"] == plan.GROUP_ROWS and c["kGroupThreads"] == plan.GROUP_THREADS == 4 * 32
    assert c["kMaxGroups"] == plan.MAX_ROW_GROUPS
    assert c["kMaxThreads"] == plan.MAX_ROW_GROUPS * plan.GROUP_THREADS
    assert c["kBlockN"] == plan.BLOCK_N
    assert c["kCombineHalf"] == plan.COMBINE_HALF
    assert c["kCombineSmemBytes"] == plan.COMBINE_SMEM_BYTES == plan.combine_smem_bytes(c["kMaxListedCtas"])
    assert (
        c["kCombineFixedBytes"] == plan.COMBINE_FIXED_BYTES and c["kCombineMaxRows"] == plan.MAX_COMBINE_ROWS
    )
    # the combine kernel: 4 output columns per thread of a half cover the 512 of a row
    assert c["kCombineHalf"] * 4 == c["kDimV"]
    # a part row: 512 fp16 columns, one scale per quarter, the LSE (what the model and footprint count)
    assert c["kPartQuarters"] == plan.PART_QUARTERS and c["kDimV"] * 2 + 4 * 4 + 4 == plan.PART_ROW_BYTES
    assert c["kStageBytes"] == plan.STAGE_BYTES == c["kBlockN"] * (c["kDimQK"] * 2 + 16)  # rows padded 16 B
    assert c["kSlotBytes"] == c["kStages"] * c["kBlockN"] * 4  # a stage's slot indices, staged a tile ahead
    fixed = c["kStages"] * c["kStageBytes"] + c["kSlotBytes"] + c["kCursorBytes"]
    assert c["kSmemFixedBytes"] == plan.SMEM_FIXED_BYTES == fixed
    per_group = c["kReduceBytesPerGroup"] + c["kMaskBytesPerGroup"]
    assert c["kSmemBytesPerGroup"] == plan.SMEM_PER_GROUP_BYTES == per_group
    assert plan.MAX_SMEM_BYTES == c["kMaxSmemBytes"] == plan.smem_bytes(3) <= SMEM_LIMIT_BYTES
    assert kc.DYNAMIC_SMEM == {VERIFY: plan.MAX_SMEM_BYTES, COMBINE: plan.COMBINE_SMEM_BYTES}
    assert MASK_WORD_BITS == 32  # the kernel reads word j / 32, bit j % 32
    assert c["kMaxCluster"] == plan.MAX_CLUSTER and c["kMaxListedCtas"] == plan.MAX_LISTED_CTAS


def test_the_constant_parser_sees_a_changed_source():
    text = KERNEL_SOURCE.read_text()
    assert "constexpr int kStages = 2;" in text
    changed = cuh_constants(text.replace("constexpr int kStages = 2;", "constexpr int kStages = 3;"))
    grown = changed["kStageBytes"] + changed["kBlockN"] * 4  # a stage and its slot indices
    assert changed["kSmemFixedBytes"] == plan.SMEM_FIXED_BYTES + grown
    assert changed["kMaxSmemBytes"] == plan.MAX_SMEM_BYTES + grown


# ---------------------------------------------------------------- the real build


@pytest.fixture(scope="module")
def reports():
    if (reason := nvcc_available()) is not None:
        pytest.skip(reason)
    return {r.arch: r for r in kc.kernel_check()}


@needs_nvcc
@pytest.mark.slow
def test_both_archs_build_with_no_problem(reports):
    assert set(reports) == {"sm_120", "sm_90"}
    for arch, report in reports.items():
        assert report.ok, f"{arch}: {report.problems}"
        by_name = {k.short_name: k for k in report.kernels}
        assert set(by_name) == {VERIFY, COMBINE}, arch
        for k in report.kernels:
            assert k.arch == arch
            assert 0 < k.registers <= REGISTER_LIMIT, (arch, k.short_name, k.registers)
            assert k.spill_store_bytes == 0 and k.spill_load_bytes == 0, (arch, k.short_name)
            assert violations(k, kc.DYNAMIC_SMEM[k.short_name]) == []
        assert by_name[VERIFY].barriers >= 1  # it synchronises the block


@needs_nvcc
@pytest.mark.slow
def test_sass_uses_the_tensor_cores_or_says_why_not(reports):
    for arch, report in reports.items():
        if cuobjdump_here():
            assert report.sass is not None and report.sass_unavailable is None, arch
            assert report.sass.count("HMMA") > 0, arch  # mma.sync
            assert report.sass.count("LDSM") > 0, arch  # ldmatrix
            assert report.sass.count("LDGSTS") > 0, arch  # cp.async
            assert report.sass.forbidden == [], arch
        else:
            assert report.sass is None
            assert "cuobjdump" in report.sass_unavailable or "nvdisasm" in report.sass_unavailable


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


@needs_nvcc
@pytest.mark.slow
def test_cli_kernel_check_ok(tmp_path):
    report_path = tmp_path / "kernel-check.json"
    result = invoke("kernel-check", "--json", str(report_path))
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("kernel-check: ok")
    for arch in ("sm_120", "sm_90"):
        assert re.search(
            rf"^{arch} {VERIFY}: \d+ registers \(limit 255\), 0/0 B spilled", result.output, re.M
        )
        if cuobjdump_here():
            assert re.search(rf"^{arch} SASS: [1-9]\d* HMMA, .*forbidden: none$", result.output, re.M)
        else:
            assert f"{arch} SASS: unavailable: " in result.output
    document = json.loads(report_path.read_text())
    assert [d["arch"] for d in document] == ["sm_120", "sm_90"]
    assert all(d["ok"] and d["problems"] == [] for d in document)


@needs_nvcc
def test_cli_kernel_check_without_cuobjdump_says_unavailable(monkeypatch):
    why = "cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
    monkeypatch.setattr(kc, "find_cuobjdump", lambda: (None, {}, why))
    result = invoke("kernel-check", "--arch", "sm_120")
    assert result.exit_code == 0, result.output
    assert f"sm_120 SASS: unavailable: {why}" in result.output
    assert "kernel-check: ok" in result.output


@needs_nvcc
@pytest.mark.slow
def test_cli_kernel_check_reports_the_sass_map_the_model_counts_from():
    result = invoke("kernel-check", "--arch", "sm_120")
    assert result.exit_code == 0, result.output
    for name in ("verify", "combine"):
        line = next(x for x in result.output.splitlines() if x.startswith(f"sm_120 SASS map of {name}: "))
        words = line.split(": ")[1].replace(",", "").split()
        blocks, instructions, anchors = (int(w) for w in words[::2][:3])
        assert anchors > 0 and blocks < instructions


@needs_nvcc
@pytest.mark.slow
def test_cli_kernel_check_fails_on_a_violation(monkeypatch):
    """A kernel over the shared-memory limit (a launch asking one byte more than 99 KB) fails the check."""
    monkeypatch.setattr(kc, "DYNAMIC_SMEM", {VERIFY: SMEM_LIMIT_BYTES + 1, COMBINE: 0})
    result = invoke("kernel-check", "--arch", "sm_90")
    assert result.exit_code == 1, result.output
    assert "sm_90 FAIL verify_attention_kernel: 101377 B of shared memory > 101376" in result.output
    assert "kernel-check: ok" not in result.output


def test_cli_kernel_check_without_nvcc(monkeypatch):
    monkeypatch.setattr(kc, "nvcc_available", lambda: "nvcc not found (not on PATH)")
    result = invoke("kernel-check")
    assert result.exit_code == 3, result.output
    assert "kernel-check: unavailable: nvcc not found (not on PATH)" in result.stderr

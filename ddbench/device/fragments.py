"""The emulation's warp primitives against the hardware's, on the same random fragments.

mma, ldmatrix (plain and transposed), shfl_xor and the fp16 / bf16 conversions run in one probe kernel
(kernels/probes/fragment_probe.cuh), built once by nvcc for the GPU and once by g++ for the emulation.
ldmatrix, shuffles and conversions must agree bit for bit. The emulated mma adds C and the 16 exact products
in fp32, in k order, each sum rounded to nearest; the tensor core adds them its own way (the H200, first
seen on 2026-12-04: 45 % of the outputs bit-equal, the rest off by up to 16,384 fp32 ULPs of the result,
where terms cancelled). So mma is judged in fp32 ULPs of its terms' scale, |C| + sum |a_k b_k| (the
row-scaled idea of the parity figures, for one dot product), and the raw fragments can be saved
(`save_raw`) to find the hardware's rule offline.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ddbench.kernel.build import build_emulation_library, find_kernels_dir

PROBE_EMU = Path("probes") / "fragment_probe_emu.cpp"
PROBE_CUDA = Path("probes") / "fragment_probe_torch.cu"
MMA_ULP_LIMIT = 4  # fp32 ULPs of the terms' scale: summation inside the tensor core is not specified


@dataclass(frozen=True)
class ProbeData:
    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    tiles: torch.Tensor
    values: torch.Tensor

    @property
    def trials(self) -> int:
        return self.a.shape[0]


def _bf16_words(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """uint32 words holding two random, non-zero, normal bf16 values."""
    values = (torch.randn((*shape, 2), generator=generator) * 4).to(torch.bfloat16)
    values = torch.where(values.abs() < 1e-3, torch.ones_like(values), values)
    return values.view(torch.int32).view(*shape).contiguous()


def random_probe_data(trials: int, seed: int = 0) -> ProbeData:
    g = torch.Generator().manual_seed(seed)
    return ProbeData(
        a=_bf16_words((trials, 32, 4), g),
        b=_bf16_words((trials, 32, 2), g),
        c=torch.randn(trials, 32, 4, generator=g),
        tiles=(torch.randn(trials, 4, 8, 8, generator=g) * 3)
        .to(torch.bfloat16)
        .view(torch.int16)
        .contiguous(),
        values=torch.randn(trials, 32, generator=g),
    )


@dataclass
class ProbeOutputs:
    d: torch.Tensor
    ldm: torch.Tensor
    ldm_trans: torch.Tensor
    shuffled: torch.Tensor
    packed: torch.Tensor  # (trials, 32, 3) int32: two pack_f16x2 and one pack_bf16x2 of each shuffle input
    widened: torch.Tensor  # (trials, 32, 2): f16_to_float of the first packed word's halves


def _empty_outputs(data: ProbeData, device: torch.device | str) -> ProbeOutputs:
    t = data.trials
    return ProbeOutputs(
        d=torch.full((t, 32, 4), float("nan"), device=device),
        ldm=torch.zeros(t, 32, 4, dtype=torch.int32, device=device),
        ldm_trans=torch.zeros(t, 32, 4, dtype=torch.int32, device=device),
        shuffled=torch.full((t, 32, 5), float("nan"), device=device),
        packed=torch.zeros(t, 32, 3, dtype=torch.int32, device=device),
        widened=torch.full((t, 32, 2), float("nan"), device=device),
    )


def run_emulated(data: ProbeData) -> ProbeOutputs:
    library = ctypes.CDLL(str(build_emulation_library([find_kernels_dir() / PROBE_EMU], "fragment_probe")))
    out = _empty_outputs(data, "cpu")
    error = ctypes.create_string_buffer(2048)
    tensors = [data.a, data.b, data.c, out.d, data.tiles, out.ldm, out.ldm_trans, data.values, out.shuffled]
    tensors += [out.packed, out.widened]
    code = library.ddk_fragment_probe_emu(
        *(ctypes.c_void_p(t.data_ptr()) for t in tensors),
        ctypes.c_int(data.trials),
        error,
        ctypes.c_int(2048),
    )
    if code != 0:
        raise RuntimeError(error.value.decode(errors="replace"))
    return out


def run_hardware(data: ProbeData) -> ProbeOutputs:
    from ddbench.kernel.cuda_build import load_cuda_extension

    extension = load_cuda_extension(PROBE_CUDA, "ddbench_fragment_probe")
    gpu = ProbeData(*(t.cuda() for t in (data.a, data.b, data.c, data.tiles, data.values)))
    out = _empty_outputs(data, "cuda")
    extension.probe(
        gpu.a, gpu.b, gpu.c, out.d, gpu.tiles, out.ldm, out.ldm_trans, gpu.values, out.shuffled, out.packed,
        out.widened,
    )  # fmt: skip
    torch.cuda.synchronize()
    return ProbeOutputs(
        *(t.cpu() for t in (out.d, out.ldm, out.ldm_trans, out.shuffled, out.packed, out.widened))
    )


def _fp32_ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    def ordinal(x: torch.Tensor) -> torch.Tensor:
        bits = x.contiguous().view(torch.int32).long()
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return (ordinal(a) - ordinal(b)).abs()


def _bf16_pairs(words: torch.Tensor) -> torch.Tensor:
    """(…, n) int32 words -> (…, n, 2) float64: the low bf16 half first."""
    return words.contiguous().view(torch.bfloat16).double().view(*words.shape, 2)


def mma_operands(data: ProbeData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A (t, 16, 16), B (t, 16, 8), C (t, 16, 8) in float64, from the PTX fragment layout of m16n8k16."""
    a, b = _bf16_pairs(data.a), _bf16_pairs(data.b)  # (t, 32, 4, 2), (t, 32, 2, 2)
    t = data.trials
    A = torch.zeros(t, 16, 16, dtype=torch.float64)
    B = torch.zeros(t, 16, 8, dtype=torch.float64)
    C = torch.zeros(t, 16, 8, dtype=torch.float64)
    for lane in range(32):
        g, k = lane // 4, lane % 4
        for reg, (row, col) in enumerate(((g, 2 * k), (g + 8, 2 * k), (g, 2 * k + 8), (g + 8, 2 * k + 8))):
            A[:, row, col : col + 2] = a[:, lane, reg]
        for reg, row in enumerate((2 * k, 2 * k + 8)):
            B[:, row : row + 2, g] = b[:, lane, reg]
        C[:, g, 2 * k : 2 * k + 2] = data.c[:, lane, :2].double()
        C[:, g + 8, 2 * k : 2 * k + 2] = data.c[:, lane, 2:].double()
    return A, B, C


def as_d_fragments(matrix: torch.Tensor) -> torch.Tensor:
    """(t, 16, 8) -> (t, 32, 4): each lane's four D elements, in the order the probe writes them."""
    out = torch.empty(matrix.shape[0], 32, 4, dtype=matrix.dtype)
    for lane in range(32):
        g, k = lane // 4, lane % 4
        out[:, lane] = torch.stack(
            [
                matrix[:, g, 2 * k],
                matrix[:, g, 2 * k + 1],
                matrix[:, g + 8, 2 * k],
                matrix[:, g + 8, 2 * k + 1],
            ],
            dim=-1,
        )
    return out


def mma_term_scale(data: ProbeData) -> torch.Tensor:
    """|C| + sum_k |A[m,k] B[k,n]| of every D element, (t, 32, 4) float64: what an error is measured in."""
    A, B, C = mma_operands(data)
    return as_d_fragments(A.abs() @ B.abs() + C.abs())


def _scaled_ulps(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """|a - b| in fp32 ULPs of `scale` (the spacing of fp32 numbers at that magnitude)."""
    exponent = torch.frexp(scale.float())[1].double()  # scale = m * 2^e, 0.5 <= m < 1
    ulp = torch.ldexp(torch.ones_like(exponent), (exponent - 24).int())
    return (a.double() - b.double()).abs() / ulp


def compare(data: ProbeData, emulated: ProbeOutputs, hardware: ProbeOutputs) -> dict[str, object]:
    mma_ulps = _fp32_ulps(emulated.d, hardware.d)
    scaled = _scaled_ulps(emulated.d, hardware.d, mma_term_scale(data))
    report = {
        "mma_max_fp32_ulp": float(scaled.max()),
        "mma_max_result_ulp": int(mma_ulps.max()),  # of the result itself: explodes where terms cancel
        "mma_exact_fraction": float((mma_ulps == 0).double().mean()),
        "ldmatrix_mismatches": int((emulated.ldm != hardware.ldm).sum()),
        "ldmatrix_trans_mismatches": int((emulated.ldm_trans != hardware.ldm_trans).sum()),
        "shfl_mismatches": int(
            (emulated.shuffled.view(torch.int32) != hardware.shuffled.view(torch.int32)).sum()
        ),
        "conversion_mismatches": int((emulated.packed != hardware.packed).sum())
        + int((emulated.widened.view(torch.int32) != hardware.widened.view(torch.int32)).sum()),
    }
    report["ok"] = (
        report["mma_max_fp32_ulp"] <= MMA_ULP_LIMIT
        and report["ldmatrix_mismatches"] == 0
        and report["ldmatrix_trans_mismatches"] == 0
        and report["shfl_mismatches"] == 0
        and report["conversion_mismatches"] == 0
    )
    return report


def save_raw(path: Path, data: ProbeData, emulated: ProbeOutputs, hardware: ProbeOutputs) -> None:
    """The probe's inputs and both outputs, to study the hardware's rounding offline (torch.save)."""
    parts = {"data": data, "emulated": emulated, "hardware": hardware}
    torch.save({name: dataclasses.asdict(value) for name, value in parts.items()}, path)

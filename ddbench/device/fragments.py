"""The emulation's warp primitives against the hardware's, on the same random fragments.

mma, ldmatrix (plain and transposed), shfl_xor and the fp16 / bf16 conversions run in one probe kernel
(kernels/probes/fragment_probe.cuh), built once by nvcc for the GPU and once by g++ for the emulation.
ldmatrix, shuffles and conversions must agree bit for bit; mma may differ in the order the hardware sums
its 16 products, so it is compared in fp32 ULPs.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch

from ddbench.kernel.build import build_emulation_library, find_kernels_dir

PROBE_EMU = Path("probes") / "fragment_probe_emu.cpp"
PROBE_CUDA = Path("probes") / "fragment_probe_torch.cu"
MMA_ULP_LIMIT = 4  # fp32 ULPs: summation order inside the tensor core is not specified


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


def compare(emulated: ProbeOutputs, hardware: ProbeOutputs) -> dict[str, object]:
    mma_ulps = _fp32_ulps(emulated.d, hardware.d)
    report = {
        "mma_max_fp32_ulp": int(mma_ulps.max()),
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

"""Facts a benchmark timing depends on, for pytest-benchmark's machine_info: GPU, driver, CUDA, libraries."""

from __future__ import annotations

from typing import Any

import torch

from ddbench.baselines.device import device_key
from ddbench.environment import package_version


def gpu_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML (CPU machine, missing nvidia-ml-py): unknown, not an error
        return None


def machine_facts(device: torch.device) -> dict[str, Any]:
    on_gpu = device.type == "cuda"
    return {
        "device_key": device_key(device),
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
        "gpu_capability": "sm_{}{}".format(*torch.cuda.get_device_capability(device)) if on_gpu else None,
        "gpu_driver": gpu_driver() if on_gpu else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "sglang": package_version("sglang"),
        "ddbench": package_version("ddbench"),
    }

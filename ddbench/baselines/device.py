"""The device a baseline belongs to: GPU model (baselines do not travel between GPUs), or the CPU."""

from __future__ import annotations

import platform
import re

import torch


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_key(device: torch.device | None = None) -> str:
    """`nvidia-h200`, `nvidia-rtx-pro-6000-blackwell-…`, or `cpu-x86-64`."""
    if device is not None and device.type == "cuda":
        return slug(torch.cuda.get_device_name(device))
    return "cpu-" + slug(platform.machine())

"""The device a baseline belongs to: GPU model (baselines do not travel between GPUs), or the CPU."""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from typing import Any

import torch


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_key(device: torch.device | None = None) -> str:
    """`nvidia-h200`, `nvidia-rtx-pro-6000-blackwell-…`, or `cpu-x86-64`."""
    if device is not None and device.type == "cuda":
        return slug(torch.cuda.get_device_name(device))
    return "cpu-" + slug(platform.machine())


def device_key_from_facts(device: Mapping[str, Any]) -> str:
    """The same key from a results file's recorded `environment.device` (the machine that measured)."""
    if device.get("kind") == "cuda":
        return slug(str(device.get("name", "")))
    return "cpu-" + slug(str(device.get("machine") or device.get("name", "")))

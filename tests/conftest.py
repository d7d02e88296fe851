"""Test-session set-up: on a machine without CUDA, Triton runs SGLang's kernel under its interpreter, which
Triton decides when a kernel is first decorated — so the variable is set before any test module imports it."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

"""Capture real verify-attention calls from a running SGLang server, and read them back as inputs.

`install(dir)` wraps SGLang's `extend_attention_fwd` in place and records target-verify calls;
`read_capture(path)` gives back a `Capture` (inputs ready to run, the captured output, metadata; the
reader itself lives in ddbench.inputs, since replay is an input source). The
format, the hooks and their limits: docs/capture-format.md. Names resolve lazily so that the import hook
(`ddbench.capture.autoinstall`, run at every interpreter start by the .pth file) does not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "install": "ddbench.capture.installer",
    "uninstall": "ddbench.capture.installer",
    "active": "ddbench.capture.installer",
    "Recorder": "ddbench.capture.recorder",
    "Capture": "ddbench.inputs.capture_file",
    "read_capture": "ddbench.inputs.capture_file",
    "write_capture": "ddbench.capture.format",
    "tensor_sha256": "ddbench.inputs.capture_format",
    "capture_summary": "ddbench.inputs.capture_summary",
    "capture_files": "ddbench.inputs.capture_summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ddbench.capture' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)

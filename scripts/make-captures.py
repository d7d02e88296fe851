#!/usr/bin/env python3
"""Regenerate the small captures in suites/captures/ (deterministic: same tensors, same checksums).

Each one is made the way a server makes them, minus the server: the capture wrapper is installed on SGLang's
real `extend_attention_fwd`, which then runs on generated inputs under Triton's interpreter (CPU) and is
called from SGLang-shaped frames (ddbench.capture.harness), so layer ids and out_cache_loc are captured as
in serving. RANK/WORLD_SIZE say "rank 0 of TP8" (8 of Kimi's 64 heads) and SOURCE_DATE_EPOCH fixes the
timestamp. Each capture is read back, checked, and replayed bit for bit before it is kept.

    python scripts/make-captures.py [--out suites/captures]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the CPU runs SGLang's kernel interpreted
os.environ["SOURCE_DATE_EPOCH"] = "1767225600"  # 2026-01-01T00:00:00Z
os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "8"

import torch  # noqa: E402

from ddbench.backends import get_backend  # noqa: E402
from ddbench.capture import install, read_capture  # noqa: E402
from ddbench.capture.harness import call_like_sglang  # noqa: E402
from ddbench.inputs import generate_inputs  # noqa: E402
from ddbench.suite import parse_suite  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KIMI_TP8 = {"model": "kimi-k2.6", "layout": {"tp": 8}, "seed": 7}
# name -> (case, layer id it is captured as)
CAPTURES = {
    "k26-tp8-bs1-p40-ddtree-b8": (
        {**KIMI_TP8, "prefix": 40, "tree": {"kind": "ddtree", "budget": 8}},
        3,
    ),
    "k26-tp8-bs2-p23-61-eagle": (
        {
            **KIMI_TP8,
            "batch_size": 2,
            "prefix": [23, 61],
            "tree": {"kind": "eagle", "steps": 3, "topk": 2, "num_draft_tokens": 6},
        },
        30,
    ),
    "k26-tp8-bs1-p70-ddtree-b16-page16": (
        {**KIMI_TP8, "prefix": 70, "page_size": 16, "tree": {"kind": "ddtree", "budget": 16}},
        60,
    ),
}


def make(out: Path) -> list[Path]:
    triton = get_backend("triton")
    status = triton.availability()
    if not status.ok:
        sys.exit(f"SGLang's Triton kernel cannot run here: {status.detail}")
    out.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, (entry, layer) in CAPTURES.items():
            case = parse_suite({"name": "captures", "cases": [entry]}, "make-captures").cases[0]
            x = generate_inputs(case)
            folder = Path(scratch) / name
            recorder = install(folder, model="kimi-k2.6", source="test", max_captures=1, min_free_bytes=0)
            try:
                served = call_like_sglang(x, layer)
                recorder.flush(60)
            finally:
                recorder.uninstall()
            (written,) = folder.iterdir()
            capture = read_capture(written)
            assert torch.equal(capture.output.view(torch.int16), served.view(torch.int16))
            assert capture.inputs.trees and capture.metadata["layer"] == layer
            replayed = triton.run(capture.inputs)
            assert torch.equal(replayed.view(torch.int16), capture.output.view(torch.int16)), name
            target = out / f"{name}.safetensors"
            shutil.copyfile(written, target)
            made.append(target)
            print(
                f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: "
                f"{target.stat().st_size} bytes"
            )
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "suites" / "captures")
    make(parser.parse_args().out)


if __name__ == "__main__":
    main()

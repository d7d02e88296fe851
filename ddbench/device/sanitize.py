"""Run the `cuda` backend on a few cases of a suite; started under compute-sanitizer by the device check.

python -m ddbench.device.sanitize SUITE CASE_ID [CASE_ID...]
"""

from __future__ import annotations

import sys

import torch

from ddbench.backends.cuda_kernel import CudaKernelBackend
from ddbench.inputs import generate_inputs
from ddbench.inputs.suite_file import load_suite_file


def main(argv: list[str]) -> int:
    suite_path, *ids = argv
    cases = {c.id: c for c in load_suite_file(suite_path).cases}
    backend = CudaKernelBackend()
    for case_id in ids:
        inputs = generate_inputs(cases[case_id], "cuda")
        lse = torch.empty(inputs.q_extend.shape[:2], dtype=torch.float32, device="cuda")
        out = backend.run(inputs, lse=lse)
        torch.cuda.synchronize()
        print(f"{case_id}: finite={bool(torch.isfinite(out).all())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

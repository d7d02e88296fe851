#!/usr/bin/env bash
# The prepared device run (make device-check): builds, primitives, latency and baselines, parity with the
# sanitizer beside it, calibration (ddbench/device/check.py); JSON in $OUT. DDBENCH_DEVICE_BUDGET_S bounds it.
# Runs under the GPU machine's own python3 (its torch and triton); packages it lacks come from .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
site=${DDBENCH_DEVICE_SITE:-/tmp/ddbench-site}
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
exec python3 -m ddbench.device.check

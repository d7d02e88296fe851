#!/usr/bin/env bash
# Builds the wheel, installs it alone (--no-deps) into a fresh venv outside the checkout, and checks that the
# installed ddbench finds its kernel sources inside site-packages and that each file git tracks under kernels/
# is there, byte for byte. Usage: scripts/wheel-check.sh [PYTHON]  (default: python3)
set -euo pipefail
python=${1:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

"$python" -m pip wheel -q --no-deps -w "$scratch/wheel" "$repo"
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install -q --no-deps "$scratch"/wheel/*.whl
found=$(cd "$scratch" && PYTHONPATH= "$scratch/venv/bin/python" -c \
  'from ddbench.kernel.build import find_kernels_dir; print(find_kernels_dir())')
echo "installed ddbench finds its kernels in: $found"
case "$found" in
  "$scratch"/venv/*/site-packages/ddbench/kernel_sources) ;;
  *) echo "FAIL: not the installed package data"; exit 1 ;;
esac
missing=0
while IFS= read -r tracked; do
  relative=${tracked#kernels/}
  if cmp -s "$repo/$tracked" "$found/$relative"; then
    echo "  ok $relative"
  else
    echo "  MISSING or different: $relative"
    missing=$((missing + 1))
  fi
done < <(git -C "$repo" ls-files kernels)
if [ "$missing" -ne 0 ]; then
  echo "FAIL: $missing tracked kernel file(s) not in the wheel"
  exit 1
fi
echo "every tracked file under kernels/ is in the wheel"

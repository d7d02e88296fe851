"""The import contracts (pyproject's [tool.importlinter]) hold: a lower layer never imports a higher one, and
no package imports what docs/architecture.md's layer table forbids."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_layers_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    # A dev dependency: missing, it is a broken set-up, not a reason to skip the contract.
    assert lint is not None, "lint-imports not found: install the dev extras (pip install -e '.[dev]')"
    proc = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert f"Contracts: {contracts} kept, 0 broken" in proc.stdout

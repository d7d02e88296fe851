"""Several result files as one zip: the device tool returns at most eight files from a run."""

from __future__ import annotations

import zipfile
from pathlib import Path


def bundle(out_dir: Path, names: list[str], archive: str) -> None:
    """The named files of `out_dir` zipped into `archive` beside them, the originals removed."""
    present = [out_dir / n for n in names if (out_dir / n).is_file()]
    if not present:
        return
    with zipfile.ZipFile(out_dir / archive, "w", zipfile.ZIP_DEFLATED) as bundled:
        for path in present:
            bundled.write(path, path.name)
    for path in present:
        path.unlink()

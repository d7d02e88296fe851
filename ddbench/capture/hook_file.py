"""The `ddbench-capture.pth` file that arms the capture in every Python process of an environment.

SGLang starts its TP workers as fresh processes, so a hook in the launching script is not enough; a .pth
file in site-packages runs at every interpreter start. Its one line costs nothing unless
DDBENCH_CAPTURE_DIR is set, and then only imports `ddbench.capture.autoinstall` inside try/except: a broken
or missing ddbench prints one line on stderr and Python starts as usual.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from ddbench.atomic import write_atomic

PTH_NAME = "ddbench-capture.pth"
_BODY = (
    "try:\n"
    " import ddbench.capture.autoinstall\n"
    "except Exception as e:\n"
    " sys.stderr.write('ddbench-capture.pth: capture not armed: %r\\n' % (e,))\n"
)
PTH_LINE = f"import os, sys; exec({_BODY!r}) if os.environ.get('DDBENCH_CAPTURE_DIR') else None\n"


def default_site_dir() -> Path:
    """This environment's site-packages (where pip installed ddbench and SGLang)."""
    return Path(sysconfig.get_paths()["purelib"])


def install_hook(site_dir: str | Path | None = None) -> Path:
    path = Path(site_dir or default_site_dir()) / PTH_NAME
    write_atomic(path, PTH_LINE)
    return path


def uninstall_hook(site_dir: str | Path | None = None) -> Path | None:
    """Remove the file; the path if there was one, None if it was not installed."""
    path = Path(site_dir or default_site_dir()) / PTH_NAME
    if not path.exists():
        return None
    path.unlink()
    return path

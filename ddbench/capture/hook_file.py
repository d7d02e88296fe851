"""The `ddbench-capture.pth` file that arms the capture in every Python process of an environment.

SGLang starts its TP workers as fresh processes, so a hook in the launching script is not enough; a .pth
file in site-packages runs at every interpreter start. Its one line costs nothing unless
DDBENCH_CAPTURE_DIR is set, and then only imports `ddbench.capture.autoinstall` inside try/except: a broken
or missing ddbench prints one line on stderr and Python starts as usual. Installing refuses a folder this
interpreter would never read .pth files from; uninstalling removes only the file install_hook writes.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from pathlib import Path

from ddbench.atomic import write_atomic
from ddbench.errors import InputError

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


def site_packages() -> list[Path]:
    """This interpreter's site-packages folders and its user site: where Python runs .pth files at start."""
    paths = [default_site_dir(), Path(sysconfig.get_paths()["platlib"]), *map(Path, site.getsitepackages())]
    if site.ENABLE_USER_SITE is not False:
        paths.append(Path(site.getusersitepackages()))
    return list(dict.fromkeys(p.resolve() for p in paths))


def _checked_site_dir(site_dir: str | Path) -> Path:
    """`site_dir` if it is a site folder or on sys.path (where site.addsitedir puts the folders it
    processed); anything else would hold a hook that never runs, so it is refused."""
    folder = Path(site_dir)
    on_path = {Path(p).resolve() for p in sys.path if p}
    if folder.resolve() not in {*site_packages(), *on_path}:
        raise InputError(
            "is not a site-packages folder of this Python, nor on its sys.path, so a .pth file there would "
            f"never run; use {', '.join(map(str, site_packages()))} (the default), or a folder on sys.path",
            file=str(site_dir),
            path="--site-dir",
        )
    return folder


def install_hook(site_dir: str | Path | None = None) -> Path:
    """Write the .pth file; a --site-dir that this interpreter would not read .pth files from is refused."""
    folder = default_site_dir() if site_dir is None else _checked_site_dir(site_dir)
    path = folder / PTH_NAME
    write_atomic(path, PTH_LINE)
    return path


def uninstall_hook(site_dir: str | Path | None = None) -> Path | None:
    """Remove the file if it is the one install_hook writes; the path if removed, None if there was none.

    A file of that name with other content is someone else's (or edited by hand): it is left alone."""
    path = Path(site_dir or default_site_dir()) / PTH_NAME
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise InputError(
            "is not a regular file, so not the hook install-hook writes; left alone", file=str(path)
        )
    if path.stat().st_size > len(PTH_LINE.encode()) * 2 or path.read_bytes() != PTH_LINE.encode():
        raise InputError(
            "does not hold the line `ddbench capture install-hook` writes (its content differs), so it is "
            "not ours to delete; remove it by hand if it is yours",
            file=str(path),
        )
    path.unlink()
    return path

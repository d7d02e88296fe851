""".pth files that arm ddbench in every Python process of an environment: capture, and the serving plugin
where SGLang has no plugin system.

SGLang starts its TP workers as fresh processes, so a hook in the launching script is not enough; a .pth
file in site-packages runs at every interpreter start. Its one line costs nothing unless its variable is
set (DDBENCH_CAPTURE_DIR; DDBENCH_APPLY other than off), and then only imports the module that arms the
feature, inside try/except: a broken or missing ddbench prints one line on stderr and Python starts as
usual. Installing refuses a folder this interpreter would never read .pth files from; uninstalling removes
only the file install_hook writes.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ddbench.atomic import write_atomic
from ddbench.errors import InputError


@dataclass(frozen=True)
class PthHook:
    """One .pth file: its name, the variable that arms it, the module it imports then, what it arms."""

    name: str
    variable: str
    module: str
    feature: str
    off_values: tuple[str, ...] = ("",)

    @property
    def line(self) -> str:
        body = (
            "try:\n"
            f" import {self.module}\n"
            "except Exception as e:\n"
            f" sys.stderr.write('{self.name}: {self.feature} not armed: %r\\n' % (e,))\n"
        )
        test = f"os.environ.get({self.variable!r}, '').strip().lower() not in {self.off_values!r}"
        return f"import os, sys; exec({body!r}) if {test} else None\n"


CAPTURE_HOOK = PthHook("ddbench-capture.pth", "DDBENCH_CAPTURE_DIR", "ddbench.capture.autoinstall", "capture")
PTH_NAME = CAPTURE_HOOK.name
PTH_LINE = CAPTURE_HOOK.line


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


def install_hook(site_dir: str | Path | None = None, hook: PthHook = CAPTURE_HOOK) -> Path:
    """Write the .pth file; a --site-dir that this interpreter would not read .pth files from is refused."""
    folder = default_site_dir() if site_dir is None else _checked_site_dir(site_dir)
    path = folder / hook.name
    write_atomic(path, hook.line)
    return path


def uninstall_hook(site_dir: str | Path | None = None, hook: PthHook = CAPTURE_HOOK) -> Path | None:
    """Remove the file if it is the one install_hook writes; the path if removed, None if there was none.

    A file of that name with other content is someone else's (or edited by hand): it is left alone."""
    path = Path(site_dir or default_site_dir()) / hook.name
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise InputError(
            "is not a regular file, so not the hook install-hook writes; left alone", file=str(path)
        )
    line = hook.line.encode()
    if path.stat().st_size > len(line) * 2 or path.read_bytes() != line:
        raise InputError(
            f"does not hold the line `ddbench {hook.feature} install-hook` writes (its content differs), so "
            "it is not ours to delete; remove it by hand if it is yours",
            file=str(path),
        )
    path.unlink()
    return path

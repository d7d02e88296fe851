"""The wheel carries the kernel sources; an installed ddbench finds them and builds outside site-packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ddbench.kernel.build import (
    PACKAGED_KERNELS,
    KernelBuildError,
    choose_build_dir,
    find_kernels_dir,
    locate_kernels,
)

REPO = Path(__file__).resolve().parents[1]
PACKAGE_KEY = f"ddbench.{PACKAGED_KERNELS}"


def _tracked(folder: str) -> list[str]:
    """Paths (from the repository root) of every file git tracks under `folder`."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot list the tracked files")
    proc = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", folder], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    files = proc.stdout.splitlines()
    assert files, f"git tracks no file under {folder}/"
    return files


def _tracked_kernel_files() -> list[str]:
    """Paths relative to kernels/ of every file git tracks there."""
    return [path.removeprefix("kernels/") for path in _tracked("kernels")]


def _package_data_globs() -> list[str]:
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return config["tool"]["setuptools"]["package-data"][PACKAGE_KEY]


def test_package_data_globs_cover_every_tracked_kernel_file():
    kernels = REPO / "kernels"
    covered = {
        str(p.relative_to(kernels)) for pattern in _package_data_globs() for p in kernels.glob(pattern)
    }
    left_out = sorted(set(_tracked_kernel_files()) - covered)
    assert not left_out, f"add a glob to [tool.setuptools.package-data] {PACKAGE_KEY!r} for {left_out}"


def test_setup_maps_the_package_data_onto_the_kernels_folder():
    text = (REPO / "setup.py").read_text()
    assert f'package_dir={{"{PACKAGE_KEY}": "kernels"}}' in text
    assert f'"{PACKAGE_KEY}"]' in text  # and lists it as a package


def test_built_wheel_holds_every_tracked_kernel_file(tmp_path):
    tracked = _tracked_kernel_files()
    source = tmp_path / "src"  # a copy: building in place would leave build/ and egg-info in the checkout
    anywhere = shutil.ignore_patterns("*.egg-info", "__pycache__", ".*cache", ".bench*")
    top_level = {".git", ".venv", ".whl", "build", "results"}  # the checkout's own; ddbench/results is code

    def skip(folder: str, names: list[str]) -> set[str]:
        return set(anywhere(folder, names)) | (top_level & set(names) if Path(folder) == REPO else set())

    shutil.copytree(REPO, source, ignore=skip)
    build = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "out", str(source)]
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *build],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "out").glob("ddbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    prefix = f"ddbench/{PACKAGED_KERNELS}/"
    assert sorted(f for f in tracked if prefix + f not in names) == []
    # And the package itself, its data files (JSON schemas) included.
    assert sorted(f for f in _tracked("ddbench") if f not in names) == []


def _kernels_folder(root: Path) -> Path:
    (root / "include" / "ddk").mkdir(parents=True)
    (root / "include" / "ddk" / "primitives.h").write_text("// marker\n")
    return root


def test_installed_package_data_wins_over_a_foreign_kernels_package(tmp_path):
    site = tmp_path / "site-packages"
    packaged = _kernels_folder(site / "ddbench" / PACKAGED_KERNELS)
    (site / "kernels").mkdir()  # e.g. an unrelated `kernels` distribution beside ddbench
    assert locate_kernels(site / "ddbench", site) == packaged


def test_a_checkout_uses_its_kernels_folder(tmp_path):
    checkout = _kernels_folder(tmp_path / "kernels")
    assert locate_kernels(tmp_path / "ddbench", tmp_path) == checkout


def test_a_foreign_kernels_folder_is_not_taken_for_ours(tmp_path):
    (tmp_path / "kernels" / "kernels").mkdir(parents=True)
    with pytest.raises(KernelBuildError, match="kernel sources are missing") as err:
        locate_kernels(tmp_path / "ddbench", tmp_path)
    assert str(tmp_path / "ddbench" / PACKAGED_KERNELS) in str(err.value)


def test_this_checkout_finds_its_own_kernels():
    assert find_kernels_dir() == REPO / "kernels"


def test_a_checkout_builds_beside_its_sources(tmp_path):
    home = tmp_path / "home"
    assert choose_build_dir(tmp_path / "kernels", tmp_path, {}, home) == tmp_path / "build" / "ddk"


def test_an_installed_copy_builds_into_the_user_cache(tmp_path):
    packaged, site, home = tmp_path / "site" / "ddbench" / PACKAGED_KERNELS, tmp_path / "site", tmp_path / "h"
    assert choose_build_dir(packaged, site, {}, home) == home / ".cache" / "ddbench" / "ddk"
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert choose_build_dir(packaged, site, xdg, home) == tmp_path / "xdg" / "ddbench" / "ddk"


def test_the_build_dir_variable_overrides_both(tmp_path):
    env = {"DDBENCH_BUILD_DIR": str(tmp_path / "mine"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert choose_build_dir(tmp_path / "kernels", tmp_path, env, tmp_path) == tmp_path / "mine"

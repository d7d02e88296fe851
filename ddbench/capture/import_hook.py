"""Run a callback on a module right after it executes, before anything else can import names from it.

Installed on sys.meta_path, the finder lets the normal finders locate the module and wraps only its loader's
`exec_module`; everything else is delegated to the real loader (sources, resources). It removes itself
once it has fired, and an exception in the callback is logged, never raised into the import.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

log = logging.getLogger("ddbench.capture")


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, finder: PatchOnImport) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._finder.fired(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` right after `fullname` is first executed."""

    def __init__(self, fullname: str, callback: Callable[[ModuleType], None]) -> None:
        self.fullname = fullname
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.fullname:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _PatchingLoader(spec.loader, self)
        return spec

    def fired(self, module: ModuleType) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            self.callback(module)
        except Exception:
            log.exception("ddbench capture: patching %s failed; it runs unpatched", self.fullname)


def call_after_import(fullname: str, callback: Callable[[ModuleType], None]) -> None:
    """`callback(module)` now if the module is already imported, else right after its first import."""
    module = sys.modules.get(fullname)
    if module is not None:
        try:
            callback(module)
        except Exception:
            log.exception("ddbench capture: patching %s failed; it runs unpatched", fullname)
        return
    sys.meta_path.insert(0, PatchOnImport(fullname, callback))

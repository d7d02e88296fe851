"""Wrap SGLang's `extend_attention_fwd` in place, wherever the Triton backend will look it up.

SGLang 0.5.23's TritonAttnBackend imports the function inside `__init__` and keeps
`self.extend_attention_fwd = torch.compiler.disable(extend_attention_fwd)`; every verify call goes through
that attribute. So the wrapper replaces (1) the module attribute, which backends created later bind,
(2) any other module global bound to the original (a `from … import` that already ran), and (3) the
attribute of backend objects that already exist (objects of classes defined in `sglang.*` whose attribute
is the original or wraps it, e.g. through torch.compiler.disable). `uninstall()` restores exactly what it
replaced, and only where the wrapper is still in place.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import inspect
import logging
import sys
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ddbench.capture.recorder import Recorder
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

TARGET_MODULE = EXTEND_ATTENTION_MODULE
FUNCTION = "extend_attention_fwd"
_MARK = "_ddbench_capture_recorder"

log = logging.getLogger("ddbench.capture")
_lock = threading.RLock()
_active: Recorder | None = None
_EXIT_FLUSH_S = 60.0  # at interpreter exit, how long queued captures may take to reach the disk
_exit_hook = False


@dataclass
class _Patch:
    owner: Any  # a module or an object
    name: str
    previous: Any
    replacement: Any

    def apply(self) -> None:
        setattr(self.owner, self.name, self.replacement)

    def restore(self) -> None:
        current = vars(self.owner).get(self.name)
        if current is self.replacement:
            setattr(self.owner, self.name, self.previous)


def make_wrapper(original: Callable[..., Any], recorder: Recorder) -> Callable[..., Any]:
    """The function the server calls instead: capture around an unchanged call of the original."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def extend_attention_fwd(*args: Any, **kwargs: Any) -> Any:
        pending = recorder.before_call(signature, args, kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            recorder.abandon(pending)
            raise
        recorder.after_call(pending)
        return result

    setattr(extend_attention_fwd, _MARK, recorder)
    return extend_attention_fwd


def is_wrapper(fn: Any) -> bool:
    return getattr(fn, _MARK, None) is not None if isinstance(fn, types.FunctionType) else False


def _reaches(value: Any, original: Callable[..., Any]) -> bool:
    """`value` is the original or a function wrapping it (functools.wraps chains, torch.compiler.disable)."""
    for _ in range(4):
        if value is original:
            return True
        if not isinstance(value, types.FunctionType):
            return False
        value = getattr(value, "__wrapped__", None)
    return False


def _module_patches(
    module: ModuleType, original: Callable[..., Any], wrapper: Callable[..., Any]
) -> list[_Patch]:
    patches = [_Patch(module, FUNCTION, original, wrapper)]
    for other in list(sys.modules.values()):
        if other is module or not isinstance(other, ModuleType):
            continue
        namespace = getattr(other, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                patches.append(_Patch(other, name, original, wrapper))
    return patches


def _instance_patches(original: Callable[..., Any], wrapper: Callable[..., Any]) -> list[_Patch]:
    """Attributes of existing SGLang objects (the Triton backend) bound to the original or a wrapper of it."""
    import torch

    disabled: Callable[..., Any] | None = None
    patches = []
    for obj in gc.get_objects():
        cls = type(obj)
        if not str(getattr(cls, "__module__", "")).startswith("sglang.") or isinstance(obj, type):
            continue
        try:
            namespace = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            continue
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if not _reaches(value, original):
                continue
            if value is original:
                replacement = wrapper
            else:  # keep the wrapper outside torch.compile's tracing, as SGLang kept the original
                disabled = disabled or torch.compiler.disable(wrapper)
                replacement = disabled
            patches.append(_Patch(obj, name, value, replacement))
    return patches


def install(
    directory: str | Path,
    *,
    every: int = 1,
    layers: Iterable[int] | None = None,
    max_captures: int = 64,
    max_bytes: int = 1 << 30,
    min_free_bytes: int = 1 << 30,
    model: str | None = None,
    queue_size: int = 4,
    source: str = "sglang-server",
    module: ModuleType | None = None,
    scan_objects: bool = True,
) -> Recorder:
    """Start capturing target-verify calls of SGLang's `extend_attention_fwd` into `directory`.

    Captures every `every`-th eligible call of the given `layers` (all when None), at most `max_captures`
    files and `max_bytes` bytes in this process, never leaving less than `min_free_bytes` on the disk.
    Installing again replaces the previous recorder. Imports SGLang's module unless `module` is given.
    """
    global _active, _exit_hook
    recorder = Recorder(
        directory,
        every=every,
        layers=layers,
        max_captures=max_captures,
        max_bytes=max_bytes,
        min_free_bytes=min_free_bytes,
        model=model,
        queue_size=queue_size,
        source=source,
    )
    with _lock:
        if _active is not None:
            _active.uninstall()
        module = module if module is not None else importlib.import_module(TARGET_MODULE)
        current = getattr(module, FUNCTION)
        original = current.__wrapped__ if is_wrapper(current) else current
        wrapper = make_wrapper(original, recorder)
        patches = _module_patches(module, original, wrapper)
        if scan_objects:
            patches += _instance_patches(original, wrapper)
        for patch in patches:
            patch.apply()
        recorder._restore = functools.partial(_restore, recorder, patches)
        _active = recorder
        if not _exit_hook:
            atexit.register(_flush_at_exit)
            _exit_hook = True
    log.info(
        "ddbench capture: recording target-verify calls to %s (every %d, layers %s, "
        "at most %d files / %d bytes; %d places patched)",
        recorder.directory,
        every,
        "all" if layers is None else sorted(recorder.layers or ()),
        max_captures,
        max_bytes,
        len(patches),
    )
    return recorder


def _restore(recorder: Recorder, patches: list[_Patch]) -> None:
    global _active
    with _lock:
        for patch in reversed(patches):
            patch.restore()
        if _active is recorder:
            _active = None


def _flush_at_exit() -> None:
    recorder = _active
    if recorder is not None:
        try:
            recorder.flush(_EXIT_FLUSH_S)
        except Exception:
            log.exception("ddbench capture: flushing at exit failed")


def active() -> Recorder | None:
    """The installed recorder of this process, if any."""
    return _active


def uninstall() -> None:
    """Restore the original function everywhere and finish pending writes (no-op if nothing is installed)."""
    recorder = _active
    if recorder is not None:
        recorder.uninstall()

"""ddbench as an SGLang plugin: the entry point SGLang calls, and the same arming for the .pth route.

SGLang 0.5.23 loads the entry points of group `sglang.srt.plugins` (filtered by SGLANG_PLUGINS) in every
scheduler/TP process before the model runner starts, then applies the hooks they registered; `register`
puts an AROUND hook on `extend_attention_fwd` there. SGLang versions without plugins get the very same
hook through `ddbench apply install-hook` (a .pth file: `ddbench.serving.autoinstall`). Whichever route
arms first wins; the other then does nothing, so the hook is never stacked on itself.

Nothing here may stop a server: a bad setting or a candidate that cannot be made logs one line and leaves
the plugin off (Triton serves).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ddbench.capture.hook_file import PthHook
from ddbench.sglang_target import EXTEND_ATTENTION_MODULE

# The .pth route: armed when DDBENCH_APPLY is set to anything but off.
PTH_HOOK = PthHook("ddbench-apply.pth", "DDBENCH_APPLY", "ddbench.serving.autoinstall", "apply", ("", "off"))
FUNCTION = "extend_attention_fwd"
TARGET = f"{EXTEND_ATTENTION_MODULE}.{FUNCTION}"

log = logging.getLogger("ddbench.serving")
_lock = threading.Lock()
_route: str | None = None  # "plugin" or "pth" once armed in this process
_hook: Any = None


def armed_route() -> str | None:
    return _route


def active_hook() -> Any:
    """The ApplyHook of this process, if armed (its counters, its breaker)."""
    return _hook


def make_hook(env: Mapping[str, str]) -> Any:
    """The ApplyHook the environment asks for, or None (off, or refused: said in one log line)."""
    from ddbench.serving.settings import settings_from_env

    try:
        settings = settings_from_env(env)
    except ValueError as err:
        log.error("ddbench apply: not armed: %s", err)
        return None
    if settings is None:
        return None
    try:
        from ddbench.serving.candidate import load_candidate
        from ddbench.serving.hook import ApplyHook

        hook = ApplyHook(settings, load_candidate(settings))
    except Exception as err:
        log.error("ddbench apply: not armed: candidate %s: %s: %s", settings.backend, type(err).__name__, err)
        return None
    log.info(
        "ddbench apply: %s with candidate %s, comparing every %d eligible calls against bounds %s; "
        "log and breach captures in %s",
        settings.mode,
        settings.backend,
        settings.every,
        settings.bounds,
        settings.directory,
    )
    return hook


def _claim(route: str, env: Mapping[str, str]) -> Any:
    global _route, _hook
    with _lock:
        if _route is not None:
            if _route != route:
                log.info(
                    "ddbench apply: already armed through the %s route; the %s route does nothing",
                    _route,
                    route,
                )
            return None
        hook = make_hook(env)
        if hook is not None:
            _route, _hook = route, hook
        return hook


def register() -> None:
    """The `sglang.srt.plugins` entry point: register the AROUND hook (SGLang applies it)."""
    try:
        hook = _claim("plugin", os.environ)
        if hook is None:
            return
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        HookRegistry.register(TARGET, hook, HookType.AROUND)
    except Exception:
        log.exception("ddbench apply: registering the hook failed; Triton serves")


def wrap_function(original: Callable[..., Any], hook: Callable[..., Any]) -> Callable[..., Any]:
    """What the .pth route puts in place of `extend_attention_fwd`: the hook around the original."""

    @functools.wraps(original)
    def extend_attention_fwd(*args: Any, **kwargs: Any) -> Any:
        return hook(original, *args, **kwargs)

    return extend_attention_fwd


def arm_module(module: ModuleType) -> None:
    """The .pth route: wrap the function on SGLang's module the moment it has executed."""
    hook = _claim("pth", os.environ)
    if hook is not None:
        setattr(module, FUNCTION, wrap_function(getattr(module, FUNCTION), hook))


def disarm() -> None:
    """Forget this process's hook (SGLang cannot unload a plugin; tests arm and disarm in one process)."""
    global _route, _hook
    with _lock:
        _route, _hook = None, None

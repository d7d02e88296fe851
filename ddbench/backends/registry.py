"""Find backends by name: built-ins, the `ddbench.backends` entry-point group, or `module:attr` specs."""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points

import torch

from ddbench.backends.captured import CapturedCandidateBackend, CapturedOutputBackend
from ddbench.backends.cuda_emu import CudaEmuBackend
from ddbench.backends.cuda_kernel import CudaKernelBackend
from ddbench.backends.protocol import Backend
from ddbench.backends.reference import ReferenceBackend
from ddbench.backends.triton_sglang import SglangTritonBackend
from ddbench.errors import BackendUnavailable, InputError

ENTRY_POINT_GROUP = "ddbench.backends"

BUILTINS: dict[str, Callable[[], Backend]] = {
    "reference": ReferenceBackend,
    "reference-fp64": lambda: ReferenceBackend(torch.float64),
    "triton": SglangTritonBackend,
    "cuda": CudaKernelBackend,
    "cuda-emu": CudaEmuBackend,
    "captured": CapturedOutputBackend,
    "captured-candidate": CapturedCandidateBackend,
}


# Families of backends named `<prefix><name>` that a higher layer provides (the self-test's mutants, from
# ddbench/explain): whoever resolves names passes the families it serves, so the registry stays below them
# and no import registers anything behind the caller's back.
Families = Mapping[str, Callable[[str], Backend]]
"""prefix -> `factory(full_name)`, which builds the backend or raises KeyError naming the known ones."""
NO_FAMILIES: Families = {}


def is_family_name(arg: str, families: Families = NO_FAMILIES) -> bool:
    """A name one of `families` resolves (`mutant:mask-stride`), not a module to import."""
    return any(arg.startswith(prefix) for prefix in families)


def is_plugin_spec(arg: str, families: Families = NO_FAMILIES) -> bool:
    """`package.module:attr` names a plug-in to import; `mutant:mask-stride` is a family's name."""
    module, _, attr = arg.partition(":")
    return bool(module and attr) and not is_family_name(arg, families)


def _instantiate(obj: object, origin: str) -> Backend:
    """Accept a backend instance, a class, or a zero-argument factory; anything else is the user's error."""
    candidate = obj
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "run")):
        if not isinstance(obj, type) and not _zero_argument_python_callable(obj):
            raise InputError(
                "is not a backend, a backend class or a zero-argument factory written in Python "
                f"({type(obj).__name__} {getattr(obj, '__name__', '')!s} is not called)",
                path=origin,
            )
        try:
            candidate = obj()
        except Exception as err:  # os:system, a class needing arguments: not a backend factory
            raise InputError(
                f"is not a backend, a backend class or a zero-argument factory: calling it raised "
                f"{type(err).__name__}: {err}",
                path=origin,
            ) from None
    missing = [attr for attr in ("name", "availability", "run") if not hasattr(candidate, attr)]
    if missing:
        raise InputError(
            f"does not implement the backend protocol (missing {', '.join(missing)})", path=origin
        )
    if not isinstance(candidate.name, str) or not candidate.name:  # type: ignore[attr-defined]
        raise InputError("its `name` must be a non-empty string", path=origin)
    return candidate  # type: ignore[return-value]


def _zero_argument_python_callable(obj: object) -> bool:
    """A factory we may call: Python code with no required parameter (never a builtin such as os.abort)."""
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return False
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def _entry_points() -> dict[str, object]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_backend_names() -> list[str]:
    return sorted({*BUILTINS, *_entry_points()})


def load_backend_spec(spec: str) -> Backend:
    """`package.module:attribute` naming a backend instance, class or factory."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"expected module:attribute, got {spec!r}", path="--backend")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise BackendUnavailable(
            f"backend {spec}: cannot import {module_name}: {type(err).__name__}: {err}"
        ) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"module {module_name} has no attribute {attr!r}", path="--backend")
        obj = getattr(obj, part)
    return _instantiate(obj, f"--backend {spec}")


def get_backend(name: str, families: Families = NO_FAMILIES) -> Backend:
    if name in BUILTINS:
        return BUILTINS[name]()
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()  # type: ignore[attr-defined]
        except Exception as err:
            raise BackendUnavailable(f"backend {name} (entry point): {type(err).__name__}: {err}") from None
        return _instantiate(obj, f"entry point {name}")
    for prefix, factory in families.items():
        if name.startswith(prefix):
            try:
                return factory(name)
            except KeyError as err:
                raise InputError(err.args[0], path="--backends") from None
    raise InputError(
        f"unknown backend {name!r}; known: {', '.join(known_backend_names())} "
        + "".join(f" (and {prefix}<name>)" for prefix in families),
        path="--backends",
    )


def split_names(value: str | None) -> list[str] | None:
    """`a, b,,c` -> ["a", "b", "c"]; None or empty -> None (no selection)."""
    names = [v.strip() for v in value.split(",") if v.strip()] if value else []
    return names or None

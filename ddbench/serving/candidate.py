"""The candidate a server runs: any backend `ddbench run` accepts, built without a JIT build by default."""

from __future__ import annotations

from ddbench.backends.cuda_kernel import CudaKernelBackend
from ddbench.backends.protocol import Backend
from ddbench.backends.registry import get_backend, is_plugin_spec, load_backend_spec
from ddbench.serving.settings import ApplySettings


def load_candidate(settings: ApplySettings) -> Backend:
    """The backend named by DDBENCH_APPLY_BACKEND; InputError or BackendUnavailable when it cannot be had.

    `cuda` loads only a build made beforehand (`ddbench apply build`) unless DDBENCH_APPLY_BUILD=allow:
    eight TP ranks must not start eight nvcc builds at once."""
    if settings.backend == CudaKernelBackend.name:
        return CudaKernelBackend(build_if_missing=settings.allow_build)
    if is_plugin_spec(settings.backend):
        return load_backend_spec(settings.backend)
    return get_backend(settings.backend)

"""Backends: the protocol, the registry and the built-in implementations."""

from ddbench.backends.protocol import Availability, Backend, preferred_device
from ddbench.backends.registry import get_backend, known_backend_names, load_backend_spec

__all__ = [
    "Availability",
    "Backend",
    "get_backend",
    "known_backend_names",
    "load_backend_spec",
    "preferred_device",
]

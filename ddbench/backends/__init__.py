"""Backends: the protocol, the registry and the built-in implementations."""

from ddbench.backends.protocol import (
    Availability,
    Backend,
    Capabilities,
    Launch,
    capabilities,
    preferred_device,
    prepared,
)
from ddbench.backends.registry import get_backend, known_backend_names, load_backend_spec

__all__ = [
    "Availability",
    "Backend",
    "Capabilities",
    "Launch",
    "capabilities",
    "get_backend",
    "known_backend_names",
    "load_backend_spec",
    "preferred_device",
    "prepared",
]

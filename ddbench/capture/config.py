"""The server hook's settings, read from environment variables (pure: a mapping in, install() kwargs out).

DDBENCH_CAPTURE_DIR        where captures go; the hook does nothing when it is unset or empty
DDBENCH_CAPTURE_EVERY      capture every Nth eligible call (default 1)
DDBENCH_CAPTURE_LAYERS     layer ids, e.g. "0,1" or "0-3,60" (default: all layers)
DDBENCH_CAPTURE_MAX        most capture files per process (default 64)
DDBENCH_CAPTURE_MAX_BYTES  most bytes per process, e.g. 500M, 2G (default 1G; K/M/G/T are powers of 1024)
DDBENCH_CAPTURE_MIN_FREE   never leave less free disk than this (default 1G)
DDBENCH_CAPTURE_MODEL      model name recorded in the metadata (default: SGLang's model path, if known)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddbench.bounded_read import parse_size

__all__ = ["config_from_env", "parse_layers", "parse_size"]

ENV_DIR = "DDBENCH_CAPTURE_DIR"
ENV_EVERY = "DDBENCH_CAPTURE_EVERY"
ENV_LAYERS = "DDBENCH_CAPTURE_LAYERS"
ENV_MAX = "DDBENCH_CAPTURE_MAX"
ENV_MAX_BYTES = "DDBENCH_CAPTURE_MAX_BYTES"
ENV_MIN_FREE = "DDBENCH_CAPTURE_MIN_FREE"
ENV_MODEL = "DDBENCH_CAPTURE_MODEL"


def parse_layers(text: str, name: str) -> frozenset[int]:
    """Layer ids from "0,1,5-7"."""
    layers: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        bounds = part.split("-")
        if not part or len(bounds) > 2 or not all(b.strip().isdigit() for b in bounds):
            raise ValueError(f"{name}={text!r}: expected layer ids such as 0,1 or 0-3,60")
        low, high = int(bounds[0]), int(bounds[-1])
        if high < low:
            raise ValueError(f"{name}={text!r}: range {part} runs backwards")
        layers.update(range(low, high + 1))
    return frozenset(layers)


def _int(env: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < minimum:
        raise ValueError(f"{name}={text!r}: expected an integer >= {minimum}")
    return int(text)


def config_from_env(env: Mapping[str, str]) -> dict[str, Any] | None:
    """install() keyword arguments, or None when DDBENCH_CAPTURE_DIR is not set; ValueError on bad values."""
    directory = env.get(ENV_DIR, "").strip()
    if not directory:
        return None
    config: dict[str, Any] = {"directory": directory}
    every = _int(env, ENV_EVERY, 1)
    if every is not None:
        config["every"] = every
    most = _int(env, ENV_MAX, 0)
    if most is not None:
        config["max_captures"] = most
    for name, key in ((ENV_MAX_BYTES, "max_bytes"), (ENV_MIN_FREE, "min_free_bytes")):
        if env.get(name, "").strip():
            config[key] = parse_size(env[name], name)
    if env.get(ENV_LAYERS, "").strip():
        config["layers"] = parse_layers(env[ENV_LAYERS], ENV_LAYERS)
    if env.get(ENV_MODEL, "").strip():
        config["model"] = env[ENV_MODEL].strip()
    return config

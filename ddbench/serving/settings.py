"""The serving plugin's settings, read from environment variables (pure: a mapping in, a record out).

DDBENCH_APPLY          off (default) | shadow | apply | apply+shadow
DDBENCH_APPLY_BACKEND  the candidate: cuda (default), any name `ddbench run` accepts, or module:attr
DDBENCH_APPLY_EVERY    compare every Nth eligible call (default 97: prime, so with any layer count the
                       compared calls walk through the layers instead of landing on the same few)
DDBENCH_APPLY_DIR      where the JSON-lines log and breach captures go (default ./ddbench-apply)
DDBENCH_APPLY_BOUNDS   the bound set whose bounds against triton judge a comparison (default: the
                       candidate's own set when it has one, else `candidate`)
DDBENCH_APPLY_BUILD    `allow`: the serving process may build the kernel itself when no build is cached
                       (default: refuse, and Triton serves; build it first with `ddbench apply build`)
DDBENCH_APPLY_COUNTERS_EVERY
                       seconds between counters lines (default 60); 0 writes one after every call the
                       candidate serves. SGLang stops its scheduler processes with SIGKILL, so the line
                       a process writes at exit is lost there: `ddbench server-parity` sets 0 to read
                       the counts of a server it stops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddbench.suite.bound_sets import BOUND_SETS

ENV_MODE = "DDBENCH_APPLY"
ENV_BACKEND = "DDBENCH_APPLY_BACKEND"
ENV_EVERY = "DDBENCH_APPLY_EVERY"
ENV_DIR = "DDBENCH_APPLY_DIR"
ENV_BOUNDS = "DDBENCH_APPLY_BOUNDS"
ENV_BUILD = "DDBENCH_APPLY_BUILD"
ENV_COUNTERS_EVERY = "DDBENCH_APPLY_COUNTERS_EVERY"

MODES = ("off", "shadow", "apply", "apply+shadow")
DEFAULT_EVERY = 97
DEFAULT_BACKEND = "cuda"
DEFAULT_DIR = "ddbench-apply"
DEFAULT_COUNTERS_EVERY_S = 60.0
# Sets with a bound against SGLang's Triton kernel: the only truth a server has at hand.
SERVING_BOUND_SETS = tuple(
    name for name, bounds in BOUND_SETS.items() if any(b["against"] == "triton" for b in bounds)
)


@dataclass(frozen=True)
class ApplySettings:
    mode: str  # one of MODES, never "off" (off has no settings)
    backend: str
    every: int
    directory: Path
    bounds: str  # a name in SERVING_BOUND_SETS
    allow_build: bool
    counters_every_s: float = DEFAULT_COUNTERS_EVERY_S

    @property
    def candidate_serves(self) -> bool:
        return self.mode.startswith("apply")

    @property
    def compares(self) -> bool:
        return self.mode.endswith("shadow")


def settings_from_env(env: Mapping[str, str]) -> ApplySettings | None:
    """The settings, or None when the plugin is off; ValueError naming the variable on a bad value."""
    mode = env.get(ENV_MODE, "").strip().lower() or "off"
    if mode not in MODES:
        raise ValueError(f"{ENV_MODE}={env[ENV_MODE]!r}: expected one of {', '.join(MODES)}")
    if mode == "off":
        return None
    backend = env.get(ENV_BACKEND, "").strip() or DEFAULT_BACKEND
    every_text = env.get(ENV_EVERY, "").strip()
    if every_text and (not every_text.isdigit() or int(every_text) < 1):
        raise ValueError(f"{ENV_EVERY}={every_text!r}: expected an integer >= 1 (1 compares every call)")
    every = int(every_text) if every_text else DEFAULT_EVERY
    default_bounds = backend if backend in SERVING_BOUND_SETS else "candidate"
    bounds = env.get(ENV_BOUNDS, "").strip() or default_bounds
    if bounds not in SERVING_BOUND_SETS:
        raise ValueError(
            f"{ENV_BOUNDS}={bounds!r}: expected a bound set with a bound against triton: "
            + ", ".join(SERVING_BOUND_SETS)
        )
    build = env.get(ENV_BUILD, "").strip().lower()
    if build not in ("", "allow", "refuse"):
        raise ValueError(f"{ENV_BUILD}={env[ENV_BUILD]!r}: expected allow or refuse")
    directory = env.get(ENV_DIR, "").strip() or DEFAULT_DIR
    return ApplySettings(
        mode, backend, every, Path(directory), bounds, build == "allow", _counters_every(env)
    )


def _counters_every(env: Mapping[str, str]) -> float:
    text = env.get(ENV_COUNTERS_EVERY, "").strip()
    if not text:
        return DEFAULT_COUNTERS_EVERY_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{ENV_COUNTERS_EVERY}={text!r}: expected a finite number of seconds >= 0")
    return seconds

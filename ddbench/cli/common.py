"""Pieces shared by the commands: the consoles, and the Session's suite loading and case selection."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

import click
from rich.console import Console

from ddbench.errors import InputError
from ddbench.runner import Session
from ddbench.runner.selection import load_suites, require_cases, select_cases
from ddbench.suite.case_count import DEFAULT_MAX_CASES


def colour_settings(env: Mapping[str, str]) -> dict[str, object]:
    """NO_COLOR (https://no-color.org: set and not empty) wins over FORCE_COLOR: rich alone still writes
    escape codes with both set. None means no escape codes at all, colour or bold."""
    return {"color_system": None} if env.get("NO_COLOR") else {}


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange that refuses NaN and infinity: NaN passes its range checks (every comparison with
    NaN is false), and a NaN limit or tolerance turns off the gate it sets."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


# Files and CI logs get wide tables: case IDs are long, and folding them makes them impossible to grep.
_WIDTH_OFF_TERMINAL = 200
_COLOUR = colour_settings(os.environ)
stdout = Console(soft_wrap=False, **_COLOUR)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=False, width=_WIDTH_OFF_TERMINAL, **_COLOUR)
stderr = Console(stderr=True, **_COLOUR)

F = TypeVar("F", bound=Callable[..., object])


def suite_file_options(command: F) -> F:
    """`--max-cases` and `--allow-captures`: the limits every command that reads suite files takes."""
    command = click.option(
        "--allow-captures",
        "allow_captures",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Also read captures from this folder (default: only the suite file's own folder). Repeatable.",
    )(command)
    return click.option(
        "--max-cases",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_CASES,
        show_default=True,
        help="Refuse a suite file that expands to more cases (counted before expanding).",
    )(command)


def timing_override_options(command: F) -> F:
    """`--max-rel-noise` and `--max-seconds`: the suite's timing settings, overridden for one command."""
    command = click.option(
        "--max-seconds",
        type=FiniteFloatRange(min=0.0, min_open=True),
        help="Override timing.max_seconds: sampling time per case (more lowers the noise of a slow case).",
    )(command)
    return click.option(
        "--max-rel-noise",
        type=FiniteFloatRange(min=0.0, min_open=True),
        help="Override timing.max_rel_noise: the IQR/median above which a timing may not become a baseline.",
    )(command)


def estimate_options(command: F) -> F:
    """`--max-memory` and `--ignore-estimates`: the memory limit a case's estimate is held to before work."""
    command = click.option(
        "--ignore-estimates", is_flag=True, help="Run cases whose estimate exceeds the memory limit anyway."
    )(command)
    return click.option(
        "--max-memory",
        type=FiniteFloatRange(min=0.0, min_open=True),
        metavar="GB",
        help="Refuse cases estimated to need more (default: half this machine's memory; a GPU's own memory).",
    )(command)


def refuse_unfit(session: Session, max_memory: float | None, ignore_estimates: bool) -> None:
    """Warn of slow cases; refuse (exit 2, naming --max-memory) cases whose estimate will not fit."""
    refusals, warnings = session.check_estimates(int(max_memory * 1e9) if max_memory else None)
    for line in warnings:
        stderr.print(f"warning: {line}", highlight=False)
    if refusals and not ignore_estimates:
        raise InputError(
            "cases that will not fit (pass --ignore-estimates to try anyway, or -k to leave them out):\n  "
            + "\n  ".join(refusals),
            path="--max-memory",
        )


__all__ = [
    "FiniteFloatRange",
    "estimate_options",
    "load_suites",
    "refuse_unfit",
    "require_cases",
    "select_cases",
    "stderr",
    "stdout",
    "suite_file_options",
    "timing_override_options",
]

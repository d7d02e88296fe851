"""Pieces shared by the commands: the consoles, and the Session's suite loading and case selection."""

from __future__ import annotations

from rich.console import Console

from ddbench.runner.selection import load_suites, require_cases, select_cases

# Files and CI logs get wide tables: case IDs are long, and folding them makes them impossible to grep.
_WIDTH_OFF_TERMINAL = 200
stdout = Console(soft_wrap=False)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=False, width=_WIDTH_OFF_TERMINAL)
stderr = Console(stderr=True)

__all__ = ["load_suites", "require_cases", "select_cases", "stderr", "stdout"]

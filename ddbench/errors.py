"""Errors that the CLI turns into a clear message and an exit code, never a traceback."""

from __future__ import annotations


class DdbenchError(Exception):
    """Base of every error the user can cause; `exit_code` follows the CLI's contract."""

    exit_code = 2

    @property
    def message(self) -> str:
        return str(self)


class InputError(DdbenchError):
    """Bad input: a malformed suite, an impossible tree, a missing file (exit 2).

    `location` names the file and the JSON path of the offending field so the user can find it.
    """

    def __init__(self, reason: str, *, file: str | None = None, path: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.path = path
        super().__init__(self.message)

    @property
    def location(self) -> str:
        parts = [p for p in (self.file, self.path) if p]
        return ": ".join(parts)

    @property
    def message(self) -> str:
        return f"{self.location}: {self.reason}" if self.location else self.reason


class TreeSpecError(InputError):
    """A tree spec that cannot be built (field names are relative to the tree spec)."""


class BackendUnavailable(DdbenchError):
    """A requested backend cannot run here (exit 3); the message says why."""

    exit_code = 3


class SuiteInvalid(InputError):
    """Every problem found in one suite file, so the author can fix them in one pass."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.message for e in errors))

    @property
    def message(self) -> str:
        return "\n".join(e.message for e in self.errors)

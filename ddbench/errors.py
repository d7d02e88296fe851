"""Errors that the CLI turns into a clear message and an exit code, never a traceback.

A message quotes what the user wrote (a label, a path, a value jsonschema refused); a 100 KB label must
not become a 100 KB error. Every line of a message is cut to MAX_LINE_CHARS, keeping its head and tail and
saying how much was cut, so the field and the reason stay readable.
"""

from __future__ import annotations

MAX_LINE_CHARS = 500
_HEAD, _TAIL = 300, 150


def shorten(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """`text` if it is short, else its head and tail around a note of how many characters were cut."""
    if len(text) <= limit:
        return text
    head, tail = min(_HEAD, limit // 2), min(_TAIL, limit // 4)
    return f"{text[:head]}…[{len(text) - head - tail} characters cut]…{text[-tail:]}"


def shorten_lines(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return "\n".join(shorten(line, limit) for line in text.split("\n"))


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
        self.reason = shorten_lines(reason)
        self.file = None if file is None else shorten(file)
        self.path = None if path is None else shorten(path)
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

    def __init__(self, message: str) -> None:
        super().__init__(shorten_lines(message))


class SuiteInvalid(InputError):
    """Every problem found in one suite file, so the author can fix them in one pass."""

    def __init__(self, errors: list[InputError]) -> None:
        # Each error is already cut to size; the list itself is not cut again.
        self.errors = errors
        self.reason = "\n".join(e.message for e in errors)
        self.file = self.path = None
        Exception.__init__(self, self.reason)

    @property
    def message(self) -> str:
        return "\n".join(e.message for e in self.errors)

"""`-k` expressions over cases, like pytest's: words joined by and / or / not, with parentheses.

A word matches a case when it equals one of its tags, or when its parts (split at `-`, and at a `.` not
followed by a digit) are a run of consecutive parts of the case ID: `bs1` selects `...-bs1-...` but not
`...-bs16-...`, `ddtree-b16` selects `...-ddtree-b16-...`, `kimi-k2.6` selects every Kimi K2.6 case and `6`
none. Case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ddbench.errors import InputError
from ddbench.suite.model import Case

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_ID_SEPARATOR = re.compile(r"-+|\.(?!\d)")  # a dot between digits is a version (k2.6), not a separator
Predicate = Callable[[Case], bool]


def id_parts(text: str) -> list[str]:
    return [part for part in _ID_SEPARATOR.split(text.lower()) if part]


def _contains_run(parts: list[str], run: list[str]) -> bool:
    n = len(run)
    return n > 0 and any(parts[i : i + n] == run for i in range(len(parts) - n + 1))


def _word(word: str) -> Predicate:
    w, run = word.lower(), id_parts(word)
    return lambda case: w in (t.lower() for t in case.tags) or _contains_run(id_parts(case.id), run)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _TOKEN.findall(text)
        self.pos = 0

    def fail(self, reason: str) -> InputError:
        return InputError(f"{reason} in filter {self.text!r}", path="-k")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise self.fail("unexpected end")
        self.pos += 1
        return token

    def parse(self) -> Predicate:
        pred = self.disjunction()
        if self.peek() is not None:
            raise self.fail(f"unexpected {self.peek()!r}")
        return pred

    def disjunction(self) -> Predicate:
        left = self.conjunction()
        while self.peek() == "or":
            self.take()
            right, prev = self.conjunction(), left
            left = lambda c, a=prev, b=right: a(c) or b(c)  # noqa: E731
        return left

    def conjunction(self) -> Predicate:
        left = self.negation()
        while self.peek() == "and":
            self.take()
            right, prev = self.negation(), left
            left = lambda c, a=prev, b=right: a(c) and b(c)  # noqa: E731
        return left

    def negation(self) -> Predicate:
        if self.peek() == "not":
            self.take()
            inner = self.negation()
            return lambda c: not inner(c)
        token = self.take()
        if token == "(":
            inner = self.disjunction()
            if self.take() != ")":
                raise self.fail("missing )")
            return inner
        if token in ("and", "or", ")"):
            raise self.fail(f"unexpected {token!r}")
        return _word(token)


def case_filter(expression: str | None) -> Predicate:
    if not expression or not expression.strip():
        return lambda case: True
    return _Parser(expression).parse()


def normal_shard(shard: str | None) -> str | None:
    """`i/n` as the results file records it (`01/4` -> `1/4`); InputError for anything else."""
    if not shard:
        return None
    try:
        index, count = (int(part) for part in shard.split("/"))
    except ValueError:
        raise InputError(f"expected i/n like 1/4, got {shard!r}", path="--shard") from None
    if not 1 <= index <= count:
        raise InputError(f"shard {index} of {count}: i must be between 1 and n", path="--shard")
    return f"{index}/{count}"


def select_shard(cases: list[Case], shard: str | None) -> list[Case]:
    """`i/n` (1-based): every n-th case from the i-th, so each shard gets a mix of small and large cases."""
    normal = normal_shard(shard)
    if normal is None:
        return cases
    index, count = (int(part) for part in normal.split("/"))
    return cases[index - 1 :: count]

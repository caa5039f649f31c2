"""The project's own error types. Every bad input becomes a :class:`SpecError` naming file, field, reason."""

from __future__ import annotations

import re

__all__ = ["SimtrainError", "SpecError", "SpecIssue", "MissingRuleError", "clip_quoted", "QUOTE_CHARS"]

#: the longest quoted piece of input a message keeps whole; longer ones are cut (see clip_quoted)
QUOTE_CHARS = 40
_LONG_QUOTED = re.compile(rf"(?<![\w'\"])(?:'([^'\n]{{{QUOTE_CHARS + 1},}})'|\"([^\"\n]{{{QUOTE_CHARS + 1},}})\")(?!\w)")


def clip_quoted(message: str) -> str:
    """``message`` with every quoted part longer than :data:`QUOTE_CHARS` cut short: a reason may
    quote a piece of the offending input, never a long run of a file's content."""
    def cut(m: re.Match) -> str:
        text = m.group(1) if m.group(1) is not None else m.group(2)
        return repr(text[:QUOTE_CHARS - 3]) + "…"
    return _LONG_QUOTED.sub(cut, message)


class SimtrainError(Exception):
    """Base class of every error simtrain raises on purpose."""


class SpecIssue:
    """One problem in one input: where (file, dotted field path, and the line when the file's parser
    gave one) and what is wrong. Reasons quote an offending value only clipped (a short ``repr``)."""

    __slots__ = ("file", "field", "reason", "line")

    def __init__(self, file: str | None, field: str, reason: str, line: int | None = None) -> None:
        self.file, self.field, self.reason, self.line = file, field, clip_quoted(str(reason)), line

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        at = f" (line {self.line})" if self.line else ""
        return f"{where}{self.field or '<document>'}: {self.reason}{at}"

    def __repr__(self) -> str:
        line = f", line={self.line!r}" if self.line else ""
        return f"SpecIssue({self.file!r}, {self.field!r}, {self.reason!r}{line})"


class SpecError(SimtrainError, ValueError):
    """Bad input: a spec, model or config that cannot be used. ``issues`` lists every problem found."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))

    @classmethod
    def one(cls, file: str | None, field: str, reason: str) -> SpecError:
        return cls([SpecIssue(file, field, reason)])

    @property
    def fields(self) -> list[str]:
        return [i.field for i in self.issues]


class MissingRuleError(SimtrainError, KeyError):
    """An op kind with no registered cost rule: never silently free."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "missing rule"

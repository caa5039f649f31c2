"""The project's own error types. Every bad input becomes a :class:`SpecError` naming file, field, reason."""

from __future__ import annotations

__all__ = ["SimtrainError", "SpecError", "SpecIssue", "MissingRuleError"]


class SimtrainError(Exception):
    """Base class of every error simtrain raises on purpose."""


class SpecIssue:
    """One problem in one input: where (file, dotted field path) and what is wrong."""

    __slots__ = ("file", "field", "reason")

    def __init__(self, file: str | None, field: str, reason: str) -> None:
        self.file, self.field, self.reason = file, field, reason

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        return f"{where}{self.field or '<document>'}: {self.reason}"

    def __repr__(self) -> str:
        return f"SpecIssue({self.file!r}, {self.field!r}, {self.reason!r})"


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

"""Semantic versions: ``MAJOR.MINOR.PATCH`` with an optional ``-prerelease``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_PATTERN = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?$"
)


@total_ordering
@dataclass(frozen=True)
class Version:
    """A parsed version; versions compare by semver precedence."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{self.prerelease}" if self.prerelease else text

    def _key(self):
        # A version without a prerelease ranks above all of its prereleases.
        parts = []
        for part in self.prerelease.split(".") if self.prerelease else []:
            parts.append((0, int(part), "") if part.isdigit() else (1, 0, part))
        return (self.major, self.minor, self.patch, not self.prerelease, parts)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()


def parse(text: str) -> Version:
    """Parse ``MAJOR.MINOR.PATCH[-PRERELEASE]``.

    Raises:
        ValueError: if ``text`` is not a semantic version.
    """
    match = _PATTERN.match(text.strip())
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, prerelease = match.groups()
    return Version(int(major), int(minor), int(patch), prerelease or "")

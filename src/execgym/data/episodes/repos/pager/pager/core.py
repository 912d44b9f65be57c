"""Pages of a sequence: how many there are, and what each one holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


def page_count(total: int, per_page: int) -> int:
    """Number of pages needed to show ``total`` items, ``per_page`` at a time.

    An empty sequence has no pages.

    Raises:
        ValueError: if ``per_page`` is not positive or ``total`` is negative.
    """
    if per_page <= 0:
        raise ValueError(f"per_page must be positive, got {per_page}")
    if total < 0:
        raise ValueError(f"total must not be negative, got {total}")
    return total // per_page


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page: its items, its 1-based number and how many pages there are."""

    items: list[T]
    number: int
    count: int

    @property
    def has_next(self) -> bool:
        return self.number < self.count

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def paginate(items: Sequence[T], page: int, per_page: int = 10) -> Page[T]:
    """Page number ``page`` (1-based) of ``items``.

    Raises:
        IndexError: if there is no such page (page 1 of an empty sequence is empty).
        ValueError: if ``per_page`` is not positive.
    """
    count = page_count(len(items), per_page)
    if not 1 <= page <= max(count, 1):
        raise IndexError(f"page {page} is out of range 1..{count}")
    start = (page - 1) * per_page
    return Page(list(items[start : start + per_page]), page, count)

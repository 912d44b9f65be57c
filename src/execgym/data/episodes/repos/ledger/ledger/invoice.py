"""Invoices: lines of quantity x unit price, rendered as text."""

from __future__ import annotations

from dataclasses import dataclass, field


def _money(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}${cents // 100}.{cents % 100:02d}"


@dataclass(frozen=True)
class Line:
    description: str
    quantity: int
    unit_cents: int

    @property
    def total_cents(self) -> int:
        return self.quantity * self.unit_cents


@dataclass(frozen=True)
class Invoice:
    customer: str
    lines: list[Line] = field(default_factory=list)

    @property
    def total_cents(self) -> int:
        return sum(line.total_cents for line in self.lines)

    def render(self) -> str:
        rows = [f"Invoice for {self.customer}"]
        for line in self.lines:
            rows.append(
                f"{line.description:<20} {line.quantity:>4} x {_money(line.unit_cents):>10}"
                f" = {_money(line.total_cents):>12}"
            )
        rows.append(f"{'TOTAL':<40} {_money(self.total_cents):>12}")
        return "\n".join(rows)

"""Monthly sales reports: one row per sale or refund, and the month's net total."""

from __future__ import annotations

from dataclasses import dataclass


def format_amount(cents):
    dollars = cents / 100
    return "$" + format(dollars, ",.2f")


@dataclass(frozen=True)
class Sale:
    day: int
    customer: str
    cents: int  # negative for a refund


def monthly_report(month: str, sales: list[Sale]) -> str:
    rows = [f"Sales for {month}"]
    for sale in sorted(sales, key=lambda s: s.day):
        kind = "refund" if sale.cents < 0 else "sale"
        rows.append(f"{sale.day:>2} {sale.customer:<15} {kind:<6} {format_amount(sale.cents):>12}")
    rows.append(f"NET {format_amount(sum(s.cents for s in sales)):>12}")
    return "\n".join(rows)

from ledger.report import monthly_report


def test_report_is_sorted_by_day(sales):
    rows = monthly_report("March", sales).splitlines()
    assert rows[0] == "Sales for March"
    assert [row.split()[0] for row in rows[1:4]] == ["1", "3", "7"]


def test_report_sales(sales):
    assert "$1,500.00" in monthly_report("March", sales)

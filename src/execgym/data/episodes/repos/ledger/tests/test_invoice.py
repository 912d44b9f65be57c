from ledger.invoice import Invoice


def test_invoice_total(lines):
    assert Invoice("ACME", lines).total_cents == 3849


def test_invoice_render(lines):
    text = Invoice("ACME", lines).render()
    assert text.splitlines()[0] == "Invoice for ACME"
    assert "$12.50" in text and "$38.49" in text

"""ledger: invoices and sales reports. Amounts are integer cents."""

"""Ledger, top-ups, FX, VAT, invoices, hourly charging and payouts arrive with later issues."""

"""Django app of the health checks: per-server findings, SKU expectations, acceptance reports."""

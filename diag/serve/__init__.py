"""`llmdiag serve`: triage on a schedule and on an Alertmanager alert, keep the reports, serve them and
the verdict as Prometheus metrics (docs/serve.md). Every triage is `llmdiag triage`'s: the live
collection (diag/collect/runner.py) then the one analysis (diag/analyze.py)."""

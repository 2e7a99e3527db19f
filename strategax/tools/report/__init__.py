"""The HTML report of a compiled function (`f.report(...)`, `strategax-dump --html`): one
self-contained page rendered from `strategax.trace.inspection.ReportData`."""
from .page import render_report

__all__ = ["render_report"]

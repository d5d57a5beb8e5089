"""HTML reports (search Pareto report, what-if report, compare page) and launch settings for strategies.

Imports are lazy so that `autopar launch` does not pay for plotly.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "LaunchSettings",
    "launch_settings",
    "screenshot_report",
    "write_compare_report",
    "write_search_report",
    "write_whatif_report",
]

_WHERE = {
    "write_compare_report": "autopar.reports.compare_html",
    "write_search_report": "autopar.reports.html",
    "write_whatif_report": "autopar.reports.whatif_html",
    "launch_settings": "autopar.reports.launch",
    "LaunchSettings": "autopar.reports.launch",
    "screenshot_report": "autopar.reports.screenshot",
}


def __getattr__(name: str) -> Any:
    """Import the public functions on first use."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'autopar.reports' has no attribute '{name}'")

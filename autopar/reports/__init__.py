"""HTML reports (search Pareto report, what-if report, compare page).

Imports are lazy so that a command that writes no report does not pay for plotly. `launch_settings` and
`LaunchSettings` live in autopar.launch; they are re-exported here for callers of the older path.
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
    "launch_settings": "autopar.launch",
    "LaunchSettings": "autopar.launch",
    "screenshot_report": "autopar.reports.screenshot",
}


def __getattr__(name: str) -> Any:
    """Import the public functions on first use."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'autopar.reports' has no attribute '{name}'")

"""The service's web pages: plan (a problem form, the verdict first, then the search report), compare, what-if
(hardware options with their bands, ties and evidence), studies (live) and runs (add a training log, fit, read what the fit changed).

Static pages (no build step, no network; autopar/service/pages/): a shared shell (header, styles and a few helpers)
around each page's form and script. The plan page reuses the search report the job wrote (its Pareto plot, table
and launch files) rather than drawing them again. An error is the service's one-line message under the field it
names. Every string from the server is set as text (textContent), never as markup; the write token stays in the
browser tab (sessionStorage).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from autopar.defaults import DEFAULT_GPU, DEFAULT_GPUS, DEFAULT_MODEL

PAGES = {
    "plan": "plan",
    "compare": "compare",
    "whatif": "whatif",
    "studies": "studies",
    "runs": "runs",
}  # URL name -> page file


def _asset(name: str) -> str:
    return resources.files("autopar.service").joinpath("pages", name).read_text(encoding="utf-8")


@cache
def page(name: str) -> str:
    """The whole page `name` (a key of PAGES), with the CLI's default problem in its form."""
    html = (
        _asset("shell.html")
        .replace("__TITLE__", name)
        .replace("__PAGE__", name)
        .replace("__BODY__", _asset(f"{PAGES[name]}.html"))
        .replace("__SCRIPT__", _asset(f"{PAGES[name]}.js"))
    )
    return (
        html.replace("__MODEL__", DEFAULT_MODEL)
        .replace("__GPU__", DEFAULT_GPU)
        .replace("__GPUS__", str(DEFAULT_GPUS))
    )


def index_page() -> str:
    """The plan page, served at /."""
    return page("plan")

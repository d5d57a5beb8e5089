"""How a report loads plotly.js: inline (self-contained, compressed) or from the CDN.

inline (default): a partial plotly.js bundle with the trace types autopar's reports draw — scatter,
bar, parcoords (autopar/reports/assets/plotly-partial.min.js.gz, built by scripts/plotly_bundle/
from npm's plotly.js at the version the plotly Python package uses; plotly.js is MIT licensed, see
assets/PLOTLY_LICENSE) — gzip-compressed, base64-encoded into the page and decompressed by the
browser's DecompressionStream. ~0.6 MB instead of the 4.8 MB full bundle. When the installed plotly
Python package expects another plotly.js version, the full bundle from that package is inlined the
same way (~2 MB) so the figures always match the library that built them.

cdn: a <script src> to cdn.plot.ly for the same version: a few hundred KB per report, needs network.

Figures are embedded as JSON and drawn once plotly.js is ready (figure_html / RENDER_JS).
"""

from __future__ import annotations

import base64
import gzip
import json
from functools import cache
from importlib import resources

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline as po

from autopar.defaults import PLOTLY_MODES
from autopar.errors import SpecError

# trace types in the partial bundle (plotly.js lib/core has scatter; entry.js registers the others)
PARTIAL_TRACES = ("scatter", "bar", "parcoords")

_LOADER = """<script>
window.autoparPlotly = (function () {
  var el = document.getElementById("autopar-plotlyjs");
  if (!("DecompressionStream" in window)) {
    return Promise.reject(new Error("this browser cannot decompress the inlined plotly.js (no DecompressionStream); "
      + "regenerate the report with --plotly cdn"));
  }
  var bin = atob(el.textContent.trim()), bytes = new Uint8Array(bin.length);
  for (var i = 0; i < bin.length; i++) { bytes[i] = bin.charCodeAt(i); }
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).text().then(function (js) {
    var s = document.createElement("script");
    s.textContent = js;
    document.head.appendChild(s);
    return window.Plotly;
  });
})();
</script>"""

_CDN_READY = """<script>
window.autoparPlotly = window.Plotly ? Promise.resolve(window.Plotly)
  : Promise.reject(new Error("plotly.js did not load from the CDN (offline?); regenerate with --plotly inline"));
</script>"""

# Draws every embedded figure once plotly.js is ready; a failure is shown in the plot boxes.
RENDER_JS = """
  window.autoparPlotly.then(function (Plotly) {
    document.querySelectorAll("script[data-autopar-fig]").forEach(function (s) {
      var fig = JSON.parse(s.textContent), div = document.getElementById(s.getAttribute("data-autopar-fig"));
      Plotly.newPlot(div, fig.data, fig.layout, fig.config);
    });
  }).catch(function (err) {
    document.querySelectorAll(".plotly-graph-div").forEach(function (d) {
      d.textContent = "Plots unavailable: " + err.message;
      d.className += " plot-error";
    });
  });
"""


@cache
def _partial_meta() -> dict[str, object]:
    text = (
        resources.files("autopar.reports")
        .joinpath("assets", "plotly-partial.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


@cache
def inline_bundle() -> tuple[str, str]:
    """(base64 of gzip(plotly.js), description): the partial bundle when its plotly.js version is the
    one the installed plotly package targets, else the package's full bundle."""
    version = po.get_plotlyjs_version()
    if _partial_meta()["plotly_js"] == version:
        raw = resources.files("autopar.reports").joinpath("assets", "plotly-partial.min.js.gz").read_bytes()
        desc = f"plotly.js {version} partial bundle ({', '.join(PARTIAL_TRACES)})"
    else:
        raw = gzip.compress(po.get_plotlyjs().encode("utf-8"), 9, mtime=0)
        desc = f"plotly.js {version} full bundle"
    return base64.b64encode(raw).decode("ascii"), desc


def plotly_script(mode: str) -> str:
    """The <head> scripts that provide `window.autoparPlotly` (a promise of the Plotly object)."""
    if mode == "inline":
        b64, desc = inline_bundle()
        return (
            f"<!-- {desc}, gzip + base64; MIT licence: https://github.com/plotly/plotly.js -->\n"
            f'<script id="autopar-plotlyjs" type="application/octet-stream">{b64}</script>\n{_LOADER}'
        )
    if mode == "cdn":
        v = po.get_plotlyjs_version()
        return f'<script src="https://cdn.plot.ly/plotly-{v}.min.js" charset="utf-8"></script>\n{_CDN_READY}'
    raise SpecError(f"plotly={mode!r} is not supported (allowed: {', '.join(PLOTLY_MODES)})")


def figure_html(fig: go.Figure, div_id: str, config: dict[str, object]) -> str:
    """A plot <div> and its figure as embedded JSON, drawn by RENDER_JS when plotly.js is ready."""
    doc = json.loads(pio.to_json(fig, validate=False, remove_uids=True))
    doc["config"] = config
    payload = json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")
    height = fig.layout.height or 450
    return (
        f'<div id="{div_id}" class="plotly-graph-div" style="height:{height}px; width:100%;"></div>'
        f'<script type="application/json" data-autopar-fig="{div_id}">{payload}</script>'
    )


def trace_types(fig: go.Figure) -> set[str]:
    """Trace types a figure uses (tests check they are all in the partial bundle)."""
    return {t.type for t in fig.data}

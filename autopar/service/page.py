"""The service's web page: a problem form, the verdict first, then the search report of the answer.

One static page (no build step, no network): the form posts to /api/optimize and waits for the job; the verdict's
lines (the same as the CLI's first lines) are shown first, then the search report the job wrote
(/api/jobs/{id}/report: the HTML report's own Pareto plot, table and launch files, reused, not rewritten). An
error is the service's one-line message under the field it names. Every string from the server is set as text
(textContent), never as markup. Writes need the token: the page asks for it and keeps it in the tab only.
"""

from __future__ import annotations

from functools import cache

from autopar.defaults import DEFAULT_GPU, DEFAULT_GPUS, DEFAULT_MODEL

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>autopar</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #111827; background: #f8fafc; }
  header { padding: 14px 22px; background: #0f172a; color: #fff; font-weight: 600; }
  main { max-width: 1200px; margin: 0 auto; padding: 16px 22px; }
  form { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px 14px;
    background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 14px; }
  label { display: flex; flex-direction: column; font-size: 12px; color: #374151; }
  input { font: inherit; padding: 6px 8px; border: 1px solid #cbd5e1; border-radius: 6px; }
  button { font: inherit; font-weight: 600; padding: 8px 14px; border: 0; border-radius: 6px; background: #2563eb;
    color: #fff; cursor: pointer; align-self: end; }
  #verdict { list-style: none; padding: 12px 14px; margin: 14px 0; background: #fff; border-left: 4px solid #f59e0b;
    border-radius: 6px; }
  #verdict li:first-child { font-weight: 600; }
  .error { color: #b91c1c; font-size: 12px; min-height: 1em; }
  #status { color: #475569; margin: 8px 0; }
  iframe { width: 100%; height: 1400px; border: 1px solid #e5e7eb; border-radius: 8px; background: #fff; }
</style></head>
<body><header>autopar · how to parallelize LLM training on your GPUs</header><main>
<form id="problem">
  <label>model<input name="model" value="__MODEL__"><span class="error" data-for="model"></span></label>
  <label>GPU<input name="gpu" value="__GPU__"><span class="error" data-for="gpu"></span></label>
  <label>GPUs<input name="gpus" value="__GPUS__"><span class="error" data-for="gpus"></span></label>
  <label>sequence length<input name="seq_len" value="8192"><span class="error" data-for="seq_len"></span></label>
  <label>global batch<input name="global_batch" value="512"><span class="error" data-for="global_batch"></span></label>
  <label>tokens (e.g. 15T)<input name="tokens" value=""><span class="error" data-for="tokens"></span></label>
  <label>write token<input name="token" type="password" autocomplete="off"></label>
  <button type="submit" id="go">Find the layout</button>
</form>
<p id="status"></p>
<ul id="verdict" hidden></ul>
<iframe id="report" title="search report" hidden></iframe>
</main>
<script>
const form = document.getElementById("problem"), status = document.getElementById("status");
function say(text) { status.textContent = text; }
form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  document.querySelectorAll(".error").forEach(e => e.textContent = "");
  const data = Object.fromEntries(new FormData(form).entries());
  const token = data.token; delete data.token;
  for (const k of Object.keys(data)) { if (data[k] === "") delete data[k]; }
  say("searching…");
  const res = await fetch("/api/optimize?wait=600", {method: "POST",
    headers: {"content-type": "application/json", "authorization": "Bearer " + token}, body: JSON.stringify(data)});
  const doc = await res.json();
  const detail = doc.detail;
  if (!res.ok || doc.state === "failed") {
    for (const d of detail || [{loc: ["body"], msg: "HTTP " + res.status}]) {
      const slot = document.querySelector('.error[data-for="' + (d.loc || [])[1] + '"]');
      if (slot) { slot.textContent = d.msg; } else { say(d.msg); return; }
    }
    say("see the field marked above"); return;
  }
  const v = doc.result && doc.result.verdict, list = document.getElementById("verdict");
  list.replaceChildren(...(v ? v.lines : []).map(t => { const li = document.createElement("li");
    li.textContent = t; return li; }));
  list.hidden = !v;
  const frame = document.getElementById("report");
  frame.src = "/api/jobs/" + encodeURIComponent(doc.id) + "/report"; frame.hidden = false;
  say("done in " + (doc.finished - doc.started).toFixed(1) + " s");
});
</script></body></html>
"""


@cache
def index_page() -> str:
    """The page, with the CLI's default problem in the form."""
    return (
        _PAGE.replace("__MODEL__", DEFAULT_MODEL)
        .replace("__GPU__", DEFAULT_GPU)
        .replace("__GPUS__", str(DEFAULT_GPUS))
    )

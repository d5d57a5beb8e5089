<script>
const form = document.getElementById("log"), status = document.getElementById("status");
async function refresh() {
  const r = await call("GET", "/api/calibrate/runs");
  if (!r.ok) { return; }
  table(document.getElementById("runs"), [["id", "run"], ["source", "source"], ["model", "model"], ["gpu", "GPU"],
    ["num_gpus", "GPUs"], ["measured_tokens_per_s_per_gpu", "tokens/s per GPU"], ["measured_step_s", "step s"]], r.doc.runs);
}
form.addEventListener("submit", async (ev) => {
  ev.preventDefault(); clearErrors(); keepToken(form);
  say(status, "adding…");
  const r = await call("POST", "/api/calibrate/ingest-log", body(form, ["token"]));
  if (!r.ok) { showErrors(r.doc, status); return; }
  say(status, "added " + r.doc.added + " run(s), " + r.doc.duplicates + " already stored");
  lines(document.getElementById("summary"), (r.doc.warnings || []).map(String));
  refresh();
});
document.getElementById("fit").addEventListener("click", async () => {
  clearErrors(); keepToken(form);
  const group = form.querySelector("input[name=group]").value;
  say(status, "fitting…");
  const r = await call("POST", "/api/calibrate/fit", group ? {group} : {});
  if (!r.ok) { showErrors(r.doc, status); return; }
  const s = r.doc.summary || {};
  lines(document.getElementById("summary"), (s.text || []).map(String));
  say(status, "fitted: " + (r.doc.description || ""));
});
refresh();
</script>

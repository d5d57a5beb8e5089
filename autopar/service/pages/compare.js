<script>
const form = document.getElementById("compare"), status = document.getElementById("status");
const band = (e, k) => e[k + "_low"] === undefined ? "–" :
  Math.round(e[k + "_low"]).toLocaleString() + "–" + Math.round(e[k + "_high"]).toLocaleString();
form.addEventListener("submit", async (ev) => {
  ev.preventDefault(); clearErrors();
  const data = body(form);
  data.labels = (data.labels || "").split("\n").map(s => s.trim()).filter(Boolean);
  say(status, "estimating…");
  const r = await call("POST", "/api/compare", data);
  if (!r.ok) { showErrors(r.doc, status); return; }
  const rows = (Array.isArray(r.doc) ? r.doc : []).map(d => Object.assign({label: d.label, gpu: d.inputs.gpu}, d.estimate || {}));
  table(document.getElementById("rows"), [["label", "strategy"], ["gpu", "GPU"], ["tokens_per_s", "tokens/s"],
    [e => band(e, "tokens_per_s"), "80% band"], ["mfu", "MFU"], ["mem_gib", "peak GiB"], ["headroom_gib", "free GiB"],
    ["step_s", "step s"], ["bottleneck", "bottleneck"]], rows);
  say(status, rows.length + " estimates");
});
</script>

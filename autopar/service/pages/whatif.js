<script>
const form = document.getElementById("whatif"), status = document.getElementById("status");
const range = (o, k, f) => o[k] === null || o[k] === undefined ? "–" :
  f(o[k]) + (o[k + "_low"] === undefined || o[k + "_low"] === null ? "" : " (" + f(o[k + "_low"]) + "–" + f(o[k + "_high"]) + ")");
const days = x => x.toFixed(1), usd = x => "$" + (x / 1e6).toFixed(2) + "M";
form.addEventListener("submit", async (ev) => {
  ev.preventDefault(); clearErrors(); keepToken(form);
  const data = body(form, ["token"]);
  data.option = (data.option || "").split("\n").map(s => s.trim()).filter(Boolean);
  say(status, "searching every option…");
  const r = await call("POST", "/api/whatif?wait=600", data);
  if (!r.ok) { showErrors(r.doc, status); return; }
  const doc = r.doc.result || {};
  const opts = doc.options || (doc.sizing || []).map(s => Object.assign({label: s.option}, s.answer || {}));
  lines(document.getElementById("evidence"), opts.filter(o => o.evidence && o.evidence.sentence).map(o => o.evidence.sentence));
  table(document.getElementById("options"), [["rank", "#"], ["label", "option"], ["strategy", "strategy"],
    [o => range(o, "time_to_train_days", days), "days (80% band)"], [o => range(o, "total_cost_usd", usd), "cost (80% band)"],
    ["usd_per_mtoken", "$/Mtoken"], ["headroom_gib", "free GiB"], [o => o.tie ? "tie" : "", ""],
    [o => o.verify ? "verify" : "", ""]], opts);
  lines(document.getElementById("ties"), (doc.ties || []).map(t => (t.options || []).join(" and ") + ": a tie on " + t.on +
    " within the model's band (±" + Math.round(t.band_pct) + "%); measure before buying"));
  say(status, doc.message || ("done in " + (r.doc.finished - r.doc.started).toFixed(1) + " s"));
});
</script>

<script>
const form = document.getElementById("problem"), status = document.getElementById("status");
form.addEventListener("submit", async (ev) => {
  ev.preventDefault(); clearErrors(); keepToken(form);
  say(status, "searching…");
  const r = await call("POST", "/api/optimize?wait=600", body(form, ["token"]));
  if (!r.ok) { showErrors(r.doc, status); return; }
  const v = r.doc.result && r.doc.result.verdict;
  lines(document.getElementById("verdict"), v ? v.lines : []);
  const frame = document.getElementById("report");
  frame.src = "/api/jobs/" + encodeURIComponent(r.doc.id) + "/report"; frame.hidden = false;
  say(status, "done in " + (r.doc.finished - r.doc.started).toFixed(1) + " s · study serve-" + r.doc.id);
});
</script>

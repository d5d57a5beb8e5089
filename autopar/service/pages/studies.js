<script>
const status = document.getElementById("status");
async function refresh() {
  const r = await call("GET", "/api/studies");
  if (!r.ok) { say(status, "could not read the studies"); return; }
  const rows = r.doc.studies;
  const link = row => { const a = document.createElement("a"); a.href = "/api/studies/" + encodeURIComponent(row.name) + "/report";
    a.textContent = "report"; return a; };
  table(document.getElementById("studies"), [["name", "study"], ["trials", "trials"], ["started", "started"], [link, ""]], rows);
  say(status, rows.length + " studies (refreshed every 3 s)");
}
refresh(); setInterval(refresh, 3000);
</script>

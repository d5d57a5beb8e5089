"""Speed before -> after in one run (issue 15): start-up, search trials/s, exhaustive strategies/s, batch rows/s.

The "before" side is another git revision (default BASELINE_REF, main before the issue-15 work) checked
out into a temporary git worktree; both sides run the same measurement code (this file and
bench/split.py, which time whatever `autopar` their PYTHONPATH points at) in fresh processes, one
after the other on the same machine. Every figure is the best (or median, for start-up) of --repeat
runs: on a shared machine the slower runs mostly measure the neighbours.

Figures
- start-up: wall seconds of `autopar --help` and of one calibrated `autopar estimate` (median).
- search: the issue's problem (70B on 1,024 H100s, seq 8192, global batch 1024, calibrated, seed 0,
  `optimize --json`) at budgets 100 and 1000: wall seconds, and the marginal cost per trial
  (difference / 900) as ms/trial and trials/s; plus bench/split.py's time split at budget 1000.
- exhaustive: `optimize(sampler="exhaustive")` over the default problem's whole space (70B on 64
  H100s, seq 8192, batch 512, calibrated): strategies/s (space size / search wall) and the process's
  peak resident memory (MiB).
- batch: `estimate --batch` rows/s in-process (read + evaluate) on bench/startup.py's generated
  10,000-row file, analytical and calibrated.

Run: .venv/bin/python bench/search.py --speed [--baseline-ref REF] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REF = "e4cd11f"  # main before issue 15 (session 4): the "before" of the closing note
SEARCH_ARGS = [
    "optimize",
    "--gpus",
    "1024",
    "--seq-len",
    "8192",
    "--global-batch",
    "1024",
    "--seed",
    "0",
    "--sampler",
    "nsga2",
]
SEARCH_ARGS += ["--json"]

# One measurement, run as `python -c` in a fresh process with the revision's root first on sys.path.
EXHAUSTIVE = """
import json, resource, time
from autopar.calibration.apply import load_default_calibration
from autopar.catalog import get_gpu, get_model
from autopar.search import optimize
from autopar.specs import ClusterSpec, Workload
m, c = get_model("Llama-3.1-70B"), ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=64)
w, cal = Workload(seq_len=8192, global_batch=512), load_default_calibration()
t = time.perf_counter()
r = optimize(m, c, w, sampler="exhaustive", calibration=cal)
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"points": r.space_size, "seconds": dt, "peak_rss_mib": rss, "front": sum(not t.dominated for t in r.trials)}))
"""
BATCH = """
import json, sys
sys.path.insert(0, {bench!r})
from pathlib import Path
import startup
path = startup.make_batch_file(10_000, Path({tmp!r}) / "batch.csv")
print(json.dumps({{"analytical": startup.batch_rate(path, False, {rep}),
                  "calibrated": startup.batch_rate(path, True, {rep})}}))
"""


def _env(root: Path, home: Path) -> dict[str, str]:
    """The environment of a measured process: the revision's code first, a private autopar home."""
    return {**os.environ, "PYTHONPATH": str(root), "AUTOPAR_HOME": str(home)}


def _run(root: Path, home: Path, argv: list[str]) -> tuple[float, str]:
    """Wall seconds and stdout of `python ARGV` in a fresh process on the revision at `root`."""
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, *argv], cwd=root, env=_env(root, home), capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"failed at {root}: python {' '.join(argv)[:200]}\n{out.stderr[-2000:]}")
    return time.perf_counter() - t, out.stdout


def _cli(root: Path, home: Path, args: list[str], repeat: int, best: bool = False) -> float:
    """Median (or best) wall seconds of `python -m autopar ARGS`."""
    times = [_run(root, home, ["-m", "autopar", *args])[0] for _ in range(repeat)]
    return min(times) if best else statistics.median(times)


def _json(root: Path, home: Path, argv: list[str], repeat: int, key: str, high: bool) -> dict[str, Any]:
    """The best of `repeat` runs of a script printing one JSON line (best = highest/lowest `key`)."""
    rows = [json.loads(_run(root, home, argv)[1].strip().splitlines()[-1]) for _ in range(repeat)]
    return (max if high else min)(rows, key=lambda r: r[key])


def measure(root: Path, repeat: int) -> dict[str, Any]:
    """Every figure for the revision checked out at `root` (byte-compiled first, as scripts/setup.sh does,
    so neither side pays for compiling under PYTHONDONTWRITEBYTECODE)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "autopar"], cwd=root, check=True, capture_output=True
    )
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _cli(root, home, ["estimate"], 1)  # the first process trains/remembers the default model
        fig: dict[str, Any] = {
            "autopar --help (s)": _cli(root, home, ["--help"], repeat),
            "estimate, calibrated (s)": _cli(root, home, ["estimate"], repeat),
        }
        b100 = _cli(root, home, [*SEARCH_ARGS, "--budget", "100"], repeat, best=True)
        b1000 = _cli(root, home, [*SEARCH_ARGS, "--budget", "1000"], repeat, best=True)
        marginal = (b1000 - b100) / 900
        fig |= {
            "search budget 100 (s)": b100,
            "search budget 1000 (s)": b1000,
            "search marginal (ms/trial)": 1e3 * marginal,
            "search marginal (trials/s)": 1 / marginal,
        }
        ex = _json(root, home, ["-c", EXHAUSTIVE], max(1, repeat - 1), "seconds", high=False)
        fig["exhaustive (strategies/s)"] = ex["points"] / ex["seconds"]
        fig["exhaustive peak RSS (MiB)"] = ex["peak_rss_mib"]
        code = BATCH.format(bench=str(ROOT / "bench"), tmp=tmp, rep=max(1, min(repeat, 3)))
        bt = _json(root, home, ["-c", code], 1, "calibrated", high=True)
        fig["batch analytical (rows/s)"] = bt["analytical"]
        fig["batch calibrated (rows/s)"] = bt["calibrated"]
        split = _json(
            root,
            home,
            [str(ROOT / "bench" / "split.py"), "--child", "1000"],
            repeat,
            "total in process",
            False,
        )
        fig["split"] = split
    return fig


def _worktree(ref: str, where: Path) -> Path:
    """A detached checkout of `ref` (git worktree) at `where`."""
    r = subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(where), ref], cwd=ROOT, capture_output=True
    )
    if r.returncode:
        raise SystemExit(
            f"--baseline-ref {ref!r}: not a revision of this repository (git: {r.stderr.decode().strip()})"
        )
    return where


HIGHER_IS_BETTER = ("(trials/s)", "(strategies/s)", "(rows/s)")


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Markdown table: figure, before, after, and the improvement ratio (>1 = better)."""
    lines = ["| figure | before | after | better by |", "|---|---:|---:|---:|"]
    for k, a in after.items():
        if k == "split":
            continue
        b = before.get(k)
        ratio = "" if not b or not a else f"{(a / b if k.endswith(HIGHER_IS_BETTER) else b / a):.2f}x"
        bs = f"{b:,.2f}" if isinstance(b, float) else "-"
        lines.append(f"| {k} | {bs} | {a:,.2f} | {ratio} |")
    return "\n".join(lines)


def split_table(before: dict[str, float], after: dict[str, float]) -> str:
    """bench/split.py's phases of the budget-1000 search, in-process seconds, before -> after."""
    lines = ["| phase (budget 1000, in process) | before (s) | after (s) |", "|---|---:|---:|"]
    for ph in dict.fromkeys([*after, *before]):
        lines.append(f"| {ph} | {before.get(ph, 0.0):.3f} | {after.get(ph, 0.0):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help="git revision measured as 'before'")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write both sides' figures here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = _worktree(a.baseline_ref, Path(tmp) / "before")
        try:
            before = measure(base, a.repeat)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    after = measure(ROOT, a.repeat)
    print(f"before = {a.baseline_ref}, after = working tree ({ROOT})\n")
    print(table(before, after) + "\n")
    print(split_table(before["split"], after["split"]))
    if a.json:
        a.json.write_text(json.dumps({"before": before, "after": after}, indent=1) + "\n")


if __name__ == "__main__":
    main()

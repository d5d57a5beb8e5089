"""Start-up and batch benchmark: what a user waits for before autopar answers (issue 15).

Rows (wall-clock seconds, median of --repeat runs of a fresh `python -m autopar` process):
`autopar --help`, `autopar version`, a single `estimate --no-calibration`, a single calibrated
`estimate` (default problem); then `estimate --batch` rows/s measured in-process (file read +
evaluation, no process start) on a generated file of --rows rows: public runs repeated with varied
strategies (recompute, micro-batch), analytical only and calibrated.

Run: .venv/bin/python bench/startup.py [--repeat 5] [--rows 10000] [--save now.json] [--baseline before.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "autopar" / "data" / "published_runs.csv"

COMMANDS: dict[str, list[str]] = {
    "autopar --help (s)": ["--help"],
    "autopar version (s)": ["version"],
    "estimate --no-calibration (s)": ["estimate", "--no-calibration"],
    "estimate, calibrated (s)": ["estimate"],
}
# Strategy variations applied to repeated public rows: (recompute, micro_batch).
VARIATIONS = [(None, None), ("full", None), ("selective", 1), ("none", 2), ("full", 1), (None, 4)]


def wall(argv: list[str], repeat: int) -> float:
    """Median wall-clock seconds of `python -m autopar ARGV` in a fresh process."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autopar", *argv], cwd=ROOT, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make_batch_file(rows: int, path: Path) -> Path:
    """`rows` records: the public runs repeated, each repeat with another recompute / micro-batch."""
    with PUBLIC.open(newline="") as f:
        reader = csv.DictReader(f)
        base, fields = list(reader), reader.fieldnames or []
    out = []
    for i in range(rows):
        r = dict(base[i % len(base)])
        rec, mb = VARIATIONS[(i // len(base)) % len(VARIATIONS)]
        if rec is not None:
            r["recompute"] = rec
        if mb is not None:
            r["micro_batch"] = str(mb)
        r["id"] = f"{r['id']}-{i}"
        out.append(r)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(out)
    return path


def batch_rate(path: Path, calibrated: bool, repeat: int) -> float:
    """Rows/s of read_run_records + calibrated_batch (the work of `estimate --batch`), best of `repeat`.
    Imports whatever `autopar` comes first on sys.path (bench/speed.py points PYTHONPATH at a revision)."""
    from autopar.calibration.apply import load_default_calibration
    from autopar.calibration.apply.batch import calibrated_batch
    from autopar.calibration.ingest.tables import read_run_records

    cal = load_default_calibration() if calibrated else None
    best = float("inf")
    n = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        df = read_run_records(path)
        calibrated_batch(df, cal)
        best = min(best, time.perf_counter() - t0)
        n = len(df)
    return n / best


def distinct(path: Path) -> int:
    """Rows of the batch file that differ in more than their id (what a batch must evaluate)."""
    with path.open(newline="") as f:
        return len({tuple(v for k, v in r.items() if k != "id") for r in csv.DictReader(f)})


def measure(repeat: int, rows: int) -> dict[str, float]:
    figures = {name: wall(argv, repeat) for name, argv in COMMANDS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = make_batch_file(rows, Path(tmp) / "batch.csv")
        reps = max(1, min(repeat, 3))
        figures["estimate --batch --no-calibration (rows/s)"] = batch_rate(path, False, reps)
        figures["estimate --batch, calibrated (rows/s)"] = batch_rate(path, True, reps)
        figures["batch file: distinct configurations"] = distinct(path)
    return figures


def table(now: dict[str, float], before: dict[str, Any] | None) -> str:
    w = max(len(k) for k in now) + 2
    head = f"{'figure':<{w}}" + (f"{'before':>12}" if before else "") + f"{'after' if before else 'now':>12}"
    lines = [head, "-" * len(head)]
    for k, v in now.items():
        b = f"{before[k]:>12,.2f}" if before and k in before else (" " * 12 if before else "")
        lines.append(f"{k:<{w}}{b}{v:>12,.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per start-up figure (median)")
    ap.add_argument("--rows", type=int, default=10_000, help="rows of the generated batch file")
    ap.add_argument("--save", type=Path, help="write the figures as JSON here")
    ap.add_argument("--baseline", type=Path, help="JSON from an earlier --save: print before -> after")
    a = ap.parse_args()
    before = json.loads(a.baseline.read_text()) if a.baseline else None
    now = measure(a.repeat, a.rows)
    print(table(now, before))
    if a.save:
        a.save.write_text(json.dumps(now, indent=2) + "\n")


if __name__ == "__main__":
    main()

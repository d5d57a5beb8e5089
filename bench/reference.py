"""Reference fronts of the procurement problems (bench/search.py PROCUREMENT), computed once offline.

An exhaustive sweep on arrays (`--sampler exhaustive`, memory bounded by one block) of a 10^6-10^7-point
space takes minutes, too long for every benchmark run; this stores its front (minimised objective rows),
the feasible points' bounds and the command that made it, for bench/search.py to compare with.

Run: .venv/bin/python bench/reference.py [--only NAME_PART]   (writes bench/data/reference_*.json)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search import OBJECTIVES, PROCUREMENT, _problem  # noqa: E402

from autopar.objectives import parse_objectives  # noqa: E402
from autopar.search import optimize  # noqa: E402
from autopar.search.pareto import pareto_records, to_min_matrix  # noqa: E402


def reference(p: dict) -> dict:
    """The exhaustive front of one problem, as stored."""
    model, clusters, wl = _problem(p)
    objs = parse_objectives(list(OBJECTIVES))
    t = time.perf_counter()
    r = optimize(model, clusters, wl, sampler="exhaustive", objectives=OBJECTIVES)
    front = pareto_records(r.trials, objs)
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "problem": p["name"],
        "command": "python bench/reference.py",
        "revision": rev,
        "space_size": r.space_size,
        "feasible": r.n_feasible,
        "wall_s": time.perf_counter() - t,
        "objectives": list(OBJECTIVES),
        "front_min": to_min_matrix(front, objs).tolist(),
        "front_labels": [f"{x.num_gpus}x {x.gpu} {x.strategy.label()}" for x in front],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="problems whose name contains this")
    args = ap.parse_args()
    for p in PROCUREMENT:
        if args.only in p["name"]:
            out = reference(p)
            path = ROOT / "bench" / "data" / p["reference"]
            path.write_text(json.dumps(out, indent=1) + "\n")
            print(
                f"{p['name']}: {out['space_size']:,} points, front {len(out['front_min'])}, "
                f"{out['wall_s']:.0f} s -> {path}",
                flush=True,
            )


if __name__ == "__main__":
    main()

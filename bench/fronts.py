"""Same seed, same search: save or compare the trials and Pareto sets of fixed NSGA-II searches.

A change to the search machinery that only makes it faster must leave every search below unchanged:
the same strategies evaluated in the same order (trial numbers included), the same objective values
and the same Pareto set. Save a reference before the change, compare after it:

Run: .venv/bin/python bench/fronts.py --save before.json   (then, after the change)
     .venv/bin/python bench/fronts.py --compare before.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autopar.calibration.apply import load_default_calibration  # noqa: E402
from autopar.catalog import get_gpu, get_model  # noqa: E402
from autopar.search import optimize  # noqa: E402
from autopar.specs import ClusterSpec, Workload  # noqa: E402

# (label, model, gpus, counts, seq_len, global_batch, budget, seed, calibrated, local_search)
CASES: list[tuple[str, str, list[str], list[int], int, int, int, int, bool, float]] = [
    ("70B@1024 b1000 s0", "Llama-3.1-70B", ["H100-SXM"], [1024], 8192, 1024, 1000, 0, True, 0.7),
    ("70B@1024 b300 s1", "Llama-3.1-70B", ["H100-SXM"], [1024], 8192, 1024, 300, 1, True, 0.7),
    ("70B@64 b300 s2 plain", "Llama-3.1-70B", ["H100-SXM"], [64], 8192, 512, 300, 2, False, 0.0),
    ("8B@8 b300 s0", "Llama-3.1-8B", ["H100-SXM"], [8], 8192, 128, 300, 0, True, 0.7),
    ("Mixtral@256 b300 s0", "Mixtral-8x7B", ["H100-SXM"], [256], 4096, 1024, 300, 0, True, 0.7),
    ("70B hw b300 s3", "Llama-3.1-70B", ["H100-SXM", "H200"], [64, 256], 8192, 512, 300, 3, True, 0.7),
]


def _trial_row(t: Any) -> list[Any]:
    """A trial's identity and values, rounded so JSON round trips compare exactly."""
    vals = {k: round(v, 9) for k, v in sorted(t.values.items())}
    return [t.number, t.gpu, t.num_gpus, t.precision, t.strategy.label(), t.feasible, vals]


def run_case(case: tuple[Any, ...], cal: Any) -> dict[str, Any]:
    """One search: its trials in order and its Pareto set."""
    label, model, gpus, counts, seq, gb, budget, seed, calibrated, ls = case
    clusters = [ClusterSpec(gpu=get_gpu(g), num_gpus=n) for g in gpus for n in counts]
    r = optimize(
        get_model(model),
        clusters,
        Workload(seq_len=seq, global_batch=gb),
        budget=budget,
        seed=seed,
        calibration=cal if calibrated else None,
        local_search=ls,
        min_headroom_gib=2.0,
        sampler="nsga2",  # this checks the NSGA-II machinery (the default is now `auto`)
    )
    front = sorted(_trial_row(t) for t in r.trials if not t.dominated)
    return {
        "trials": [_trial_row(t) for t in r.trials],
        "pareto": front,
        "duplicates": r.stats["duplicates"],
        "optuna_trials": r.stats["optuna_trials"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", type=Path)
    g.add_argument("--compare", type=Path)
    args = ap.parse_args()
    cal = load_default_calibration()
    now = {c[0]: run_case(c, cal) for c in CASES}
    if args.save:
        args.save.write_text(json.dumps(now))
        print(f"saved {len(now)} searches to {args.save}")
        return
    ref = json.loads(args.compare.read_text())
    bad = 0
    for label, cur in now.items():
        old = ref[label]
        same_front = cur["pareto"] == old["pareto"]
        same_trials = cur["trials"] == old["trials"]
        bad += not same_front
        print(f"{label:<24} Pareto set {'same' if same_front else 'DIFFERENT'} ({len(cur['pareto'])} points); "
              f"trials {'same' if same_trials else 'different'} ({len(cur['trials'])}); "
              f"optuna trials {old['optuna_trials']} -> {cur['optuna_trials']}")  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

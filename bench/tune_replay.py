"""Replay benchmark of `autopar tune`: every published sweep (>= 5 measured layouts of one problem) replayed
through the tune loop with a runner that answers from the sweep's rows, each measurement hidden until the tune
"runs" that layout.

Per sweep: the runs until a layout within 1% of the measured best was run, the runs until the tune stopped
(and by which rule), and whether its pick is the measured best (within 1%). Beside it, on the same sweeps,
the runs to reach the best for: the model's one-shot order (the calibrated prediction, fastest first), a random
order (expected value: (n + 1) / (k + 1) with k layouts within 1% of the best), a grid order (the knobs in
ascending order, TP then PP, CP, EP, micro-batch, as a grid launcher walks them), Optuna's TPE sampler on the
candidate with no model behind it (mean over 5 seeds), and two simpler beliefs in the same loop: the prior
never updated ("no update": the one-shot order with the stop rule) and only the common offset learned
("offset only"). Targets (issue 42): the pick is the measured best in >= 90% of sweeps, with <= 50% of a
sweep's runs on average, and never more than 4 runs to reach the best.

Data: bench/data/sweeps.csv (rows no calibration saw) and the published-dataset sources with layout sweeps
(bench/ranking.py SEEN_SOURCES, flagged "seen"). Usage: python bench/tune_replay.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

from autopar.calibration.apply import load_default_calibration  # noqa: E402
from autopar.tune.candidates import Candidate, predict  # noqa: E402
from autopar.tune.loop import Tuner, TuneSettings, prior_of, run_loop  # noqa: E402
from autopar.tune.runners.base import Outcome  # noqa: E402
from autopar.tune.runners.replay import ReplayRunner  # noqa: E402

MIN_LAYOUTS = 5
WITHIN = 0.01  # "the best": within 1% of the measured best
TPE_SEEDS = 5
PRIOR_FILE = ROOT / "autopar" / "data" / "tune_prior.json"


def load_problems(only: str = "") -> list[tuple[str, str, list[Candidate], dict[str, float]]]:
    """(name, source, candidates, measured tokens/s per GPU by key) of each problem with >= 2 layouts."""
    import ranking

    calib = load_default_calibration()
    rows = {str(r["id"]): r for r in ranking._rows([ranking.SWEEPS], True)}
    out = []
    for p in ranking.load_problems([ranking.SWEEPS], seen=True, only=only):
        cands, measured = [], {}
        for lay in p.layouts:
            sp = ranking._specs(rows[lay.row_id])
            specs = (sp.model, sp.cluster, sp.workload, sp.strategy)
            c = predict(lay.label, lay.row_id, specs, calib, strict=False)
            cands.append(c)
            measured[c.key] = lay.measured
        out.append((p.name, p.source + (" (seen)" if p.seen else ""), cands, measured))
    return out


def within_problem_sd(problems: Sequence[tuple], exclude: str | None = None) -> tuple[float, int, int]:
    """(pooled sd of log(measured / predicted) around each problem's own mean, problems, layouts) over the
    unseen sources' problems, leaving out source `exclude`."""
    ss, dof, n_p, n_l = 0.0, 0, 0, 0
    for _, source, cands, measured in problems:
        if source.endswith("(seen)") or source == exclude:
            continue
        r = [math.log(measured[c.key] / c.predicted) for c in cands]
        mean = statistics.fmean(r)
        ss += sum((x - mean) ** 2 for x in r)
        dof += len(r) - 1
        n_p, n_l = n_p + 1, n_l + len(r)
    return (math.sqrt(ss / dof) if dof else math.nan), n_p, n_l


def export_prior(problems: Sequence[tuple], path: Path) -> None:
    """Write autopar/data/tune_prior.json: the pooled within-problem sd over every unseen source."""
    import json

    sd, n_p, n_l = within_problem_sd(problems)
    by_source = {}
    for src in sorted({p[1] for p in problems if not p[1].endswith("(seen)")}):
        one = [p for p in problems if p[1] == src]
        s1, p1, l1 = within_problem_sd(one)
        by_source[src] = {"within_problem_sd": round(s1, 4), "problems": p1, "layouts": l1}
    doc = {
        "within_problem_sd": round(sd, 4),
        "problems": n_p,
        "layouts": n_l,
        "by_source": by_source,
        "how": "pooled sd of log(measured / calibrated prediction) around each problem's mean, over the "
        "published sweeps no calibration saw (bench/data/sweeps.csv); python bench/tune_replay.py --export",
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}: within-problem sd {sd:.4f} ({n_p} problems, {n_l} layouts)")


def _first_best(order: Sequence[str], measured: dict[str, float]) -> int:
    """1-based position in `order` of the first layout within WITHIN of the best."""
    best = max(measured.values())
    return next(n for n, k in enumerate(order, 1) if measured[k] >= (1 - WITHIN) * best)


def replay(cands: list[Candidate], measured: dict[str, float], prior: Any = None) -> dict[str, Any]:
    """Run the tune loop against the sweep; runs to the best, runs to stop, rule, pick is best."""
    runner = ReplayRunner({k: Outcome("ok", v) for k, v in measured.items()})
    tuner = Tuner(cands, prior)
    res = run_loop(tuner, runner, TuneSettings(runs_dir=Path("/nonexistent")))
    order = [r.key for r in res.runs]
    best = max(measured.values())
    picked = measured[cands[res.pick].key] if res.pick is not None else 0.0
    return {
        "to_best": _first_best(order, measured)
        if any(measured[k] >= (1 - WITHIN) * best for k in order)
        else None,
        "runs": len(order),
        "stopped": res.stopped,
        "pick_best": picked >= (1 - WITHIN) * best,
    }


def one_shot(cands: list[Candidate], measured: dict[str, float]) -> int:
    return _first_best([c.key for c in sorted(cands, key=lambda c: -c.predicted)], measured)


def random_expected(measured: dict[str, float]) -> float:
    best = max(measured.values())
    k = sum(v >= (1 - WITHIN) * best for v in measured.values())
    return (len(measured) + 1) / (k + 1)


def grid(cands: list[Candidate], measured: dict[str, float]) -> int:
    def key(c: Candidate) -> tuple:
        s = c.strategy
        return (s.tp, s.pp, s.cp, s.ep, s.micro_batch or 1, c.key)

    return _first_best([c.key for c in sorted(cands, key=key)], measured)


def tpe(cands: list[Candidate], measured: dict[str, float], seed: int) -> int:
    """Runs (distinct layouts) Optuna's TPE needs to reach the best, with no model behind it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    keys = [c.key for c in cands]
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    seen: list[str] = []
    best = max(measured.values())
    for _ in range(50 * len(keys)):
        trial = study.ask()
        k = trial.suggest_categorical("candidate", keys)
        if k not in seen:
            seen.append(k)
            if measured[k] >= (1 - WITHIN) * best:
                return len(seen)
        study.tell(trial, measured[k])
    return len(keys)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="only sweeps whose row ids or model contain this")
    ap.add_argument("--export", action="store_true", help=f"write {PRIOR_FILE.relative_to(ROOT)} first")
    args = ap.parse_args(argv)
    problems = load_problems(args.only)
    if args.export:
        export_prior(problems, PRIOR_FILE)
    sweeps = [p for p in problems if len(p[2]) >= MIN_LAYOUTS]
    head = (
        f"{'sweep (layout sd: other sources)':<62} {'n':>3} | tune: best@ runs stop         pick | one-shot random grid  TPE | "
        "no-update offset-only"
    )
    print(head)
    print("-" * len(head))
    agg: dict[str, list[float]] = {
        k: [] for k in ("to_best", "share", "pick", "one", "rand", "grid", "tpe", "noup", "off")
    }
    for name, source, cands, measured in sweeps:
        own = source.removesuffix(" (seen)")
        loso, _, _ = within_problem_sd(problems, exclude=own)  # the layout spread of the other sources
        p = prior_of(cands, loso)
        r = replay(cands, measured, p)
        noup = replay(cands, measured, replace(p, offset_sd=1e-6, config_sd=1e-6, config_log_sd=0.0))
        off = replay(cands, measured, replace(p, config_sd=1e-6, config_log_sd=0.0))
        t = statistics.fmean(tpe(cands, measured, s) for s in range(TPE_SEEDS))
        n = len(cands)
        row = (
            f"{name[:54]:<54} ({loso:.3f}) {n:>3} | {str(r['to_best']):>5} {r['runs']:>4} {r['stopped']:<12} "
            f"{'yes' if r['pick_best'] else 'NO':>4} | {one_shot(cands, measured):>8} {random_expected(measured):>6.1f} "
            f"{grid(cands, measured):>4} {t:>4.1f} | {str(noup['to_best']):>5}/{noup['runs']:<3} "
            f"{str(off['to_best']):>5}/{off['runs']:<3}"
        )
        print(row)
        agg["to_best"].append(r["to_best"] or n)
        agg["share"].append(r["runs"] / n)
        agg["pick"].append(float(r["pick_best"]))
        agg["one"].append(one_shot(cands, measured))
        agg["rand"].append(random_expected(measured))
        agg["grid"].append(grid(cands, measured))
        agg["tpe"].append(t)
        agg["noup"].append(noup["to_best"] or n)
        agg["off"].append(off["to_best"] or n)
    if not sweeps:
        print("no sweep with >= 5 layouts")
        return 1
    m = {k: statistics.fmean(v) for k, v in agg.items()}
    print()
    print(
        f"{len(sweeps)} sweeps: tune picks the measured best in {m['pick']:.0%} (target >= 90%), stops after "
        f"{m['share']:.0%} of a sweep's runs on average (target <= 50%), reaches the best in {m['to_best']:.2f} "
        f"runs on average, {max(agg['to_best']):.0f} at most (target <= 4)"
    )
    print(
        f"runs to reach the best, mean: tune {m['to_best']:.2f} | one-shot order {m['one']:.2f} | random "
        f"{m['rand']:.2f} | grid {m['grid']:.2f} | TPE (no prior) {m['tpe']:.2f} | no update {m['noup']:.2f} | "
        f"offset only {m['off']:.2f}"
    )
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())

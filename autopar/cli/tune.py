"""CLI command `autopar tune`: find the best layout on your own cluster in a few short measured runs.

The candidates come from the search (the problem flags, as `optimize`), or from `--candidates FILE`: a
run-record file (its rows define the problem; no problem flag may be given) or a text file of strategy
labels, one per line (with the problem flags). The loop, the belief and the stop rule are autopar/tune/.
"""

from __future__ import annotations

import inspect
import math
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.common import check_plotly, resolve_calibration
from autopar.cli.options import (
    CALIBRATION,
    CLUSTER,
    STACK,
    WORKLOAD_EXTRAS,
    Flags,
    OptionSpec,
    detect,
    opt,
    problem_of,
    with_options,
)
from autopar.errors import AutoparError, MissingExtraError, SpecError

_PROBLEM = (
    "model",
    "gpu",
    "gpus",
    *CLUSTER,
    *WORKLOAD_EXTRAS,
    "cluster_name",
    "seq_len",
    "global_batch",
    "precision",
    *STACK,
)
_SEARCH = ("budget", "seed", "min_headroom", "memory_band", "fix", "forbid")
_NAMES = {"cluster_name": "--cluster"}

_TUNE: tuple[OptionSpec, ...] = (
    opt(
        "runner",
        Annotated[
            str,
            typer.Option(
                help="Where candidates run: dryrun (this host), slurm (sbatch/squeue on PATH) or "
                "'cmd:TEMPLATE' (your command, run by the shell with AUTOPAR_* variables)."
            ),
        ],
    ),
    *_PROBLEM,
    *_SEARCH,
    opt(
        "candidates",
        Annotated[
            Path | None,
            typer.Option(
                help="Shortlist: a run-record file (.csv/.jsonl/.parquet; its rows are the problem, measured "
                "columns ignored) or a .txt file of strategy labels (one per line, with the problem flags)."
            ),
        ],
        None,
    ),
    opt("pool", Annotated[int, typer.Option(min=1, help="Candidates taken from the search, at most.")], 24),
    opt("max_runs", Annotated[int | None, typer.Option(min=1, help="Stop after this many runs.")], None),
    opt("max_hours", Annotated[float | None, typer.Option(help="Stop after this many hours of runs.")], None),
    opt(
        "run_timeout",
        Annotated[float | None, typer.Option(help="Seconds before a run is stopped (FAIL).")],
        None,
    ),
    opt(
        "stop_probability",
        Annotated[float, typer.Option(help="Stop when no candidate has more chance than this to win.")],
        0.05,
    ),
    opt(
        "noise",
        Annotated[float, typer.Option(help="Run-to-run noise: a win must beat the best by more.")],
        0.01,
    ),
    opt("steps", Annotated[int, typer.Option(min=2, help="Steps of each short run, warm-up included.")], 30),
    opt(
        "warmup_steps",
        Annotated[int, typer.Option(min=0, help="Leading steps left out of a measurement.")],
        10,
    ),
    opt(
        "storage",
        Annotated[
            str | None,
            typer.Option(
                help="The study's Optuna storage (journal file, sqlite:///..., postgresql://...) "
                "[default: a journal file in the runs folder]. Running tune again resumes it."
            ),
        ],
        None,
    ),
    opt(
        "study_name",
        Annotated[str | None, typer.Option(help="Study name [default: from the candidates].")],
        None,
    ),
    opt(
        "runs_dir",
        Annotated[Path | None, typer.Option(help="Run folders [default: autopar-tune/STUDY].")],
        None,
    ),
    opt(
        "store",
        Annotated[
            str | None,
            typer.Option(
                help="Calibration store: a file or postgresql:// URL [default: $AUTOPAR_STORE, else "
                "~/.autopar/runs.db]."
            ),
        ],
        None,
    ),
    opt(
        "no_store", Annotated[bool, typer.Option("--no-store", help="Keep the runs out of the store.")], False
    ),
    opt(
        "cluster_tag",
        Annotated[
            str | None, typer.Option(help="The cluster's name in the store [default: this host's name].")
        ],
        None,
    ),
    *CALIBRATION,
    opt("as_json", Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")], False),
    opt("out", Annotated[Path | None, typer.Option(help="Write an HTML report here.")], None),
    "plotly",
)


def _given(f: Flags, names: tuple[str, ...]) -> list[str]:
    """The flags among `names` that were set to other than their default."""
    params = inspect.signature(tune_cmd).parameters
    out = []
    for raw in names:
        n = raw.split(":")[0]
        if n in params and getattr(f, n, None) not in (None, params[n].default, ()):
            out.append(_NAMES.get(n, "--" + n.replace("_", "-")))
    return out


def _check(f: Flags) -> None:
    """Flags that cannot take effect in this mode are errors; numbers in range."""
    if not 0 < f.stop_probability < 1:
        raise SpecError(f"stop-probability={f.stop_probability}: must be between 0 and 1")
    if not 0 <= f.noise < 1:
        raise SpecError(f"noise={f.noise}: must be at least 0 and below 1")
    if f.warmup_steps >= f.steps:
        raise SpecError(f"warmup-steps={f.warmup_steps}: must be below --steps {f.steps}")
    for name in ("max_hours", "run_timeout"):
        v = getattr(f, name)
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise SpecError(f"{name.replace('_', '-')}={v}: must be a positive number")
    if f.no_store and (f.store is not None or f.cluster_tag is not None):
        raise SpecError("--no-store: --store and --cluster-tag cannot take effect with it")
    if not f.no_store:
        from autopar.calibration.store.run_store import store_location

        store_location(f.store)  # a URL of another kind is refused before the first run, not after it
    if f.candidates is not None:
        bad = _given(f, (*_SEARCH, "pool"))
        if bad:
            raise SpecError(f"{', '.join(bad)} cannot apply with --candidates (no search runs); drop it")
        if f.candidates.suffix.lower() != ".txt":
            bad = _given(f, _PROBLEM)
            if bad:
                raise SpecError(
                    f"{', '.join(bad)} cannot apply with --candidates {f.candidates} (its rows give the problem); "
                    "drop it"
                )


def _candidates(f: Flags, calib: Any) -> tuple[list[Any], list[str]]:
    """The candidates and notes on where they came from."""
    from autopar.tune import candidates as cs

    if f.candidates is not None:
        if not f.candidates.is_file():
            raise SpecError(f"candidates={f.candidates}: no such file")
        if f.candidates.suffix.lower() == ".txt":
            labels = [ln.strip() for ln in f.candidates.read_text(encoding="utf-8").splitlines()]
            labels = [x for x in labels if x and not x.startswith("#")]
            if not labels:
                raise SpecError(f"candidates={f.candidates}: no strategy labels in the file")
            model, cluster, workload = problem_of(f).build_one(detect)
            return cs.from_labels(model, cluster, workload, labels, calib), [
                f"candidates: {len(labels)} labels"
            ]
        out = cs.from_records(f.candidates, calib)
        return out, [f"candidates: {len(out)} rows of {f.candidates}"]
    from autopar.search.study import optimize

    built = problem_of(f).build(detect)
    result = optimize(built.model, built.clusters, built.workload, built.settings, calibration=calib)
    out = cs.from_search(result, calib, f.pool)
    if not out:
        raise AutoparError(
            "no strategy fits this problem; nothing to tune (autopar optimize says what to change)"
        )
    return out, [f"candidates: {len(out)} of the search's feasible strategies that could be the fastest"]


@command("tune")
@with_options(*_TUNE)
def tune_cmd(f: Flags) -> None:
    """Find the best layout by measuring: short runs on your cluster, chosen by Bayesian optimisation with the
    analytical model as prior, until no untried candidate is likely to beat the best measured one.

    Every run is an Optuna trial in --storage (Ctrl-C, then the same command again, resumes: a run still going
    is re-attached, none is launched twice), and every measured run goes into the calibration store.
    """
    _need_sklearn()  # before the loop's modules, which import SciPy
    from autopar.tune.loop import Tuner, TuneSettings, prior_of, run_loop
    from autopar.tune.runners import make_runner
    from autopar.tune.study import KNOB_PARAMS, TuneStudy, fingerprint

    _check(f)
    check_plotly(f.plotly, f.out)
    runner = make_runner(f.runner, f.model)
    calib = resolve_calibration(f.calibration, f.no_calibration)
    cands, notes = _candidates(f, calib)
    keys = [c.key for c in cands]
    name = f.study_name or f"tune-{fingerprint(keys)}"
    runs_dir = (f.runs_dir or Path("autopar-tune") / name).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    storage = f.storage or str(runs_dir / "study.journal")
    tuner = Tuner(cands, prior_of(cands))
    study = TuneStudy(
        storage, name, keys, multi=len({c.hardware for c in cands}) > 1, problem=_problem_doc(cands)
    )
    study.set_knob_ranges({k: max(int(getattr(c.strategy, k) or 1) for c in cands) for k in KNOB_PARAMS})
    settings = TuneSettings(
        max_runs=f.max_runs,
        max_hours=f.max_hours,
        p_stop=f.stop_probability,
        noise=f.noise,
        steps=f.steps,
        warmup=f.warmup_steps,
        run_timeout_s=f.run_timeout,
        runs_dir=runs_dir,
    )
    tag = f.cluster_tag or socket.gethostname()
    if not f.as_json:
        console.print(
            styled(
                (f"tune {name}", "bold"),
                f": {len(cands)} candidates, runner {runner.name}, study in {storage}",
            ),
            highlight=False,
        )
    live = _Live(tuner, not f.as_json, None if f.no_store else f.store, tag, name, f.no_store)
    result = run_loop(tuner, runner, settings, study, live.event)
    result.notes[:0] = notes + live.notes
    doc = tune_json(result, storage)
    if result.pick is not None:
        doc["launch"] = _write_launch(result.candidates[result.pick], runs_dir / "pick")
    _emit(doc, f)


def _emit(doc: dict[str, Any], f: Flags) -> None:
    """Print the end (or the JSON document) and write the HTML report."""
    if f.as_json:
        emit_json(doc)
    else:
        _print_end(doc)
    if f.out is not None:
        from autopar.reports.tune_html import write_tune_report

        path = write_tune_report(doc, f.out, plotlyjs=f.plotly)
        if not f.as_json:
            console.print(f"report: {path}", highlight=False)


def _need_sklearn() -> None:
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("sklearn", "scipy")):
        raise MissingExtraError("scikit-learn", "tune", "tune (its Gaussian process)")


def _problem_doc(cands: list[Any]) -> dict[str, Any]:
    c = cands[0]
    return {
        "model": c.model.name,
        "hardware": sorted({x.hardware for x in cands}),
        "seq_len": c.workload.seq_len,
    }


class _Live:
    """The live table (one line per run as it ends) and the store writes."""

    def __init__(
        self, tuner: Any, show: bool, store: str | None, tag: str, study: str, no_store: bool
    ) -> None:
        self.tuner, self.show, self.store, self.tag, self.study = tuner, show, store, tag, study
        self.no_store = no_store
        self.best = 0.0
        self.added = 0
        self.notes: list[str] = []
        if show:
            console.print(
                f"{'run':>4}  {'strategy':<44} {'believed (80% band)':>26} {'measured':>10}  {'best so far':>11}  status"
            )

    def event(self, kind: str, run: Any) -> None:
        o = run.outcome
        if o.status == "ok" and o.tokens_per_s_per_gpu:
            self.best = max(self.best, o.tokens_per_s_per_gpu)
        if kind == "run" and not self.no_store:
            self._store(run)
        if not self.show:
            return
        b = run.believed
        believed = f"{b[0]:,.0f} ({b[1]:,.0f}-{b[2]:,.0f})" if b[0] == b[0] else "(resumed)"
        meas = f"{o.tokens_per_s_per_gpu:,.0f}" if o.tokens_per_s_per_gpu else "-"
        status = o.status if o.status == "ok" else f"{o.status}: {o.reason}"
        console.print(
            f"{run.number:>4}  {run.key[:44]:<44} {believed:>26} {meas:>10}  {self.best:>11,.0f}  {status}",
            highlight=False,
            soft_wrap=True,
        )

    def _store(self, run: Any) -> None:
        from autopar.tune.store import store_run

        c = self.tuner.cands[self.tuner.index[run.key]]
        try:
            self.added += store_run(
                self.store, c, run.outcome, Path(run.run_dir), f"{self.study}-run{run.number}", self.tag
            )
        except AutoparError as e:
            self.notes.append(f"run {run.number} not stored: {e}")


def _run_doc(run: Any, cands: list[Any], index: dict[str, int], best: float) -> dict[str, Any]:
    c = cands[index[run.key]]
    o = run.outcome
    return {
        "run": run.number,
        "strategy": c.label,
        "key": c.key,
        "candidate_id": c.candidate_id,
        "status": o.status,
        "reason": o.reason,
        "measured": o.tokens_per_s_per_gpu,
        "peak_mem_gib": o.peak_mem_gib,
        "predicted": c.predicted,
        "predicted_band": [c.lo, c.hi],
        "believed": list(run.believed),
        "p_fit": run.p_fit,
        "win_probability": run.win_probability,
        "best_so_far": best or None,
        "wall_s": run.wall_s,
        "run_dir": run.run_dir,
        "resumed": run.resumed,
        "smoke": o.smoke,
    }


def tune_json(result: Any, storage: str | None) -> dict[str, Any]:
    """The --json document (and what the HTML report renders)."""
    from autopar.search.storage import mask

    cands = result.candidates
    index = {c.key: i for i, c in enumerate(cands)}
    runs, best = [], 0.0
    for r in result.runs:
        if r.outcome.status == "ok" and r.outcome.tokens_per_s_per_gpu:
            best = max(best, r.outcome.tokens_per_s_per_gpu)
        runs.append(_run_doc(r, cands, index, best))
    measured = {r.key: r.outcome.tokens_per_s_per_gpu for r in result.runs if r.outcome.status == "ok"}
    pick = None
    if result.pick is not None:
        c = cands[result.pick]
        pick = {
            "strategy": c.label,
            "candidate_id": c.candidate_id,
            "hardware": c.hardware,
            "measured": measured.get(c.key),
            "predicted": c.predicted,
            "predicted_band": [c.lo, c.hi],
        }
    pr, po = result.prior, result.posterior
    return {
        "title": f"{cands[0].model.name} · {', '.join(sorted({c.hardware for c in cands}))}",
        "runs": runs,
        "pick": pick,
        "front": [cands[i].label for i in result.front] if result.multi else None,
        "stopped": result.stopped,
        "why": result.why,
        "study": {"name": result.study_name, "storage": mask(storage) if storage else None},
        "candidates": [
            {
                "key": c.key,
                "strategy": c.label,
                "candidate_id": c.candidate_id,
                "hardware": c.hardware,
                "predicted": c.predicted,
                "prior": [float(pr.median[i]), float(pr.lo[i]), float(pr.hi[i])],
                "posterior": [float(po.median[i]), float(po.lo[i]), float(po.hi[i])],
                "p_fit": float(po.fit[i]),
                "win_probability": float(po.win[i]),
                "measured": measured.get(c.key),
            }
            for i, c in enumerate(cands)
        ],
        "notes": result.notes,
    }


def _write_launch(c: Any, folder: Path) -> dict[str, Any]:
    """The pick's launch files (as `autopar launch` writes them) in `folder`."""
    from autopar.files import write_atomic
    from autopar.launch.settings import launch_settings

    try:
        ls = launch_settings(c.model, c.cluster, c.workload, c.strategy)
    except AutoparError as e:
        return {"dir": str(folder), "files": {}, "error": str(e)}
    files = {
        "megatron.sh": ls.torchrun,
        "job.sbatch": ls.slurm,
        "torchtitan.toml": ls.torchtitan or f"# {ls.torchtitan_reason}\n",
        "deepspeed.json": ls.deepspeed or f"// {ls.deepspeed_reason}\n",
    }
    for name, text in files.items():
        write_atomic(folder / name, text)
    return {"dir": str(folder), "files": files}


def _print_end(doc: dict[str, Any]) -> None:
    console.print()
    console.print(
        styled(("stopped", "bold"), f" ({doc['stopped']}): {doc['why']}"), highlight=False, soft_wrap=True
    )
    p = doc["pick"]
    if p is None:
        console.print("no run measured a throughput: no pick", highlight=False)
    else:
        lo, hi = p["predicted_band"]
        band = f", 80% band {lo:,.0f}-{hi:,.0f}" if lo == lo else ""
        console.print(
            styled(("pick", "bold green"), f": {p['strategy']}"),
            f" measured {p['measured']:,.0f} tokens/s per GPU (predicted {p['predicted']:,.0f}{band})",
            highlight=False,
            soft_wrap=True,
        )
    if doc.get("launch"):
        console.print(f"launch files: {doc['launch']['dir']}", highlight=False)
    for n in doc["notes"]:
        console.print(styled(("note:", "dim"), f" {n}"), soft_wrap=True)
    sys.stdout.flush()

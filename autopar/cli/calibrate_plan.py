"""CLI: `autopar calibrate plan`: the short profiling runs that most shrink the recommendation's uncertainty.

The candidates are strategy labels (as `autopar optimize` prints them); the criterion and the model of what
the cluster will measure are in autopar/calibration/planning/plan.py. Each proposed run gets the files
`autopar launch` writes (a short run: its token budget sets --train-iters / training.steps) and the
`calibrate ingest` command that brings its log back; re-running the plan then shows the narrower band.
Registered on the `calibrate` group by autopar/cli/calibrate.py (this module does not import it: no cycle).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autopar.cli.app import console, emit_json, err_console
from autopar.defaults import (
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_GPU,
    DEFAULT_GPUS,
    DEFAULT_MODEL,
    DEFAULT_PRECISION,
    DEFAULT_SEQ_LEN,
)
from autopar.errors import DataError, SpecError
from autopar.text import mask, one_line, shell_word


@dataclass
class _Setup:
    """The problem the plan is about and its candidates' predictions."""

    model: Any
    cluster: Any
    workload: Any
    labels: list[str]
    strategies: list[Any]
    estimates: list[Any]
    log_pred: Any  # np.ndarray: log of the calibrated tokens/s per GPU
    z: Any  # np.ndarray: standardised features


def _problem(
    model: str, gpu: str, gpus: int, gpus_per_node: int | None, seq_len: int, gb: int, prec: str
) -> tuple[Any, Any, Any]:
    """(model spec, cluster, workload) of the plan's problem."""
    from autopar.catalog import get_gpu, get_model
    from autopar.specs import ClusterSpec, Workload

    m = get_model(model)
    cluster = ClusterSpec(gpu=get_gpu(gpu), num_gpus=gpus, gpus_per_node=gpus_per_node)
    return m, cluster, Workload(seq_len=seq_len, global_batch=gb, precision=prec)


def _candidates(cal: Any, problem: tuple, labels: list[str], group: str | None) -> _Setup:
    """Estimate, calibrate and featurise every --strategy label (an invalid one: one line naming it)."""
    import numpy as np

    from autopar.calibration.models.features import features
    from autopar.errors import AutoparError
    from autopar.launch.labels import parse_strategy_label
    from autopar.perf.estimate import estimate

    m, cluster, workload = problem
    strategies, ests, preds, zs = [], [], [], []
    for label in labels:
        try:
            s = parse_strategy_label(label)
            est = estimate(m, cluster, workload, s)
        except (AutoparError, ValueError) as e:
            raise SpecError(f"--strategy {label!r}: {one_line(str(e))}") from None
        x = features(m, cluster, workload, s, est)
        f = cal.factors(x, [group or ""])[0][0]
        strategies.append(est.strategy or s)
        ests.append(est)
        preds.append(math.log(est.tokens_per_s_per_gpu * f))
        zs.append((x - cal.corrector.mean_) / cal.corrector.scale_)
    return _Setup(m, cluster, workload, labels, strategies, ests, np.array(preds), np.array(zs))


def _own_runs(cal: Any, store: str | None, group: str | None) -> tuple[Any, Any, int]:
    """(standardised features, y = log(measured / calibrated prediction), count) of the group's stored runs."""
    import numpy as np

    from autopar.calibration.models.features import group_of, record_features
    from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
    from autopar.calibration.store.run_store import RunStore

    if group is None:
        return np.zeros((0, len(cal.corrector.mean_))), np.zeros(0), 0
    zs, ys = [], []
    for rec in RunStore(store).records():
        meas, _ = measured_tokens_per_s_per_gpu(rec)
        if group_of(rec) != group or meas is None:
            continue
        x, est, *_ = record_features(rec)
        f = cal.factors(x, [group])[0][0]
        zs.append((x - cal.corrector.mean_) / cal.corrector.scale_)
        ys.append(math.log(meas / (est.tokens_per_s_per_gpu * f)))
    if not ys:
        raise DataError(f"--group {group!r}: the run store has no measured runs of that group")
    return np.array(zs), np.array(ys), len(ys)


def _slug(label: str) -> str:
    """A folder name for a strategy label."""
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-").lower()


def _write_launch(out: Path, n: int, setup: _Setup, i: int, steps: int) -> Path:
    """The files `autopar launch` writes, for a short run of candidate i, in out/run<n>-<label>/."""
    from autopar.cli.launch import FILES, _write
    from autopar.launch.settings import launch_settings

    w = setup.workload.model_copy(
        update={"token_budget": steps * setup.workload.global_batch * setup.workload.seq_len}
    )
    ls = launch_settings(setup.model, setup.cluster, w, setup.strategies[i])
    texts = {
        "megatron": ls.torchrun,
        "torchtitan": ls.torchtitan or f"# {ls.torchtitan_reason}\n",
        "deepspeed": ls.deepspeed or f"# {ls.deepspeed_reason}\n",
        "slurm": ls.slurm,
    }
    folder = out / f"run{n}-{_slug(setup.labels[i])}"
    _write(folder, list(FILES), texts, ls)
    return folder


def _bands(setup: _Setup, mean: Any, cov: Any) -> list[tuple[float, float, float]]:
    """(center, low, high) tokens/s per GPU of each candidate under the posterior (80% band)."""
    from autopar.calibration.planning.plan import Z80

    out = []
    for i, lp in enumerate(setup.log_pred):
        c, h = lp + mean[i], Z80 * math.sqrt(max(cov[i, i], 0.0))
        out.append((math.exp(c), math.exp(c - h), math.exp(c + h)))
    return out


def _ingest_hint(setup: _Setup, group: str, store: str | None) -> str:
    """The `calibrate ingest` command for a proposed run's log (the log's own dump gives the layout)."""
    from autopar.calibration.planning.plan import SHORT_RUN_WARMUP
    from autopar.launch.slurm import node_gpus

    words = [
        "autopar",
        "calibrate",
        "ingest",
        "LOG",
        "--model",
        setup.model.name,
        "--gpu",
        setup.cluster.gpu.name,
    ]
    words += [
        "--gpus-per-node",
        str(node_gpus(setup.cluster)),
        "--source",
        group,
        "--warmup",
        str(SHORT_RUN_WARMUP),
    ]
    if store is not None:
        words += ["--store", mask(store)]  # a server store's URL without its password
    return " ".join(w if w == "LOG" else shell_word(w) for w in words)


def plan_document(setup: _Setup, bands: list, props: list, n_own: int, group: str | None) -> dict[str, Any]:
    """The plan as one JSON-ready document (what --json prints and the table shows)."""
    from autopar.calibration.planning.plan import short_run_steps

    pick = max(range(len(bands)), key=lambda i: bands[i][0])
    cands = [
        {"strategy": lab, "tokens_per_s_per_gpu": b[0], "band": [b[1], b[2]], "band_pct": _half_pct(b)}
        for lab, b in zip(setup.labels, bands, strict=True)
    ]
    runs = []
    for n, p in enumerate(props, 1):
        steps, secs = short_run_steps(setup.estimates[p.index].step_time_s)
        runs.append(
            {
                "run": n,
                "strategy": setup.labels[p.index],
                "steps": steps,
                "gpu_hours": secs * setup.cluster.num_gpus / 3600,
                "pick_band_pct_after": 100 * math.expm1(p.pick_halfwidth_after),
            }
        )
    return {"group": group, "own_runs": n_own, "pick": setup.labels[pick], "candidates": cands, "runs": runs}


def _half_pct(b: tuple[float, float, float]) -> float:
    """The band's half-width as a percentage of its center (geometric: the band is symmetric in log)."""
    from autopar.calibration.evaluation.fit_summary import half_width_pct

    return half_width_pct(b[1], b[2])


def _print_plan(doc: dict[str, Any], hint: str | None, folders: list[Path]) -> None:
    t = Table(
        title="candidates on your cluster"
        + (
            f" ({doc['own_runs']} own run(s) of group {doc['group']!r})"
            if doc["group"]
            else " (no own runs yet)"
        ),
        title_justify="left",
    )
    for c in ("strategy", "tok/s/GPU", "80% band", "±"):
        t.add_column(c, justify="left" if c == "strategy" else "right", no_wrap=True)
    for c in doc["candidates"]:
        lo, hi = c["band"]
        mark = " (pick)" if c["strategy"] == doc["pick"] else ""
        t.add_row(
            c["strategy"] + mark,
            f"{c['tokens_per_s_per_gpu']:,.0f}",
            f"{lo:,.0f}–{hi:,.0f}",
            f"{c['band_pct']:.1f}%",
        )
    console.print(t)
    if not doc["runs"]:
        console.print(
            "no short run would shrink the decision's uncertainty by 5% or more (or by more than its own noise)",
            highlight=False,
        )
    where_of: list[Path | None] = list(folders) if folders else [None] * len(doc["runs"])
    for r, folder in zip(doc["runs"], where_of, strict=True):
        where = f"; launch files in {folder}" if folder else ""
        console.print(
            f"run {r['run']}: {r['strategy']}, {r['steps']} steps ({r['gpu_hours']:.2f} GPU-h); "
            f"the pick's band after runs 1..{r['run']}: ±{r['pick_band_pct_after']:.1f}%{where}",
            highlight=False,
        )
    if hint and doc["runs"]:
        console.print(f"then: {hint}", highlight=False, soft_wrap=True)


def plan_cmd(
    strategy: Annotated[
        list[str], typer.Option("--strategy", help="a candidate (label as autopar prints it); repeat")
    ],
    model: Annotated[str, typer.Option(help="catalog model name")] = DEFAULT_MODEL,
    gpu: Annotated[str, typer.Option(help="GPU type")] = DEFAULT_GPU,
    gpus: Annotated[int, typer.Option(help="number of GPUs")] = DEFAULT_GPUS,
    gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node \\[default: the GPU's]")] = None,
    seq_len: Annotated[int, typer.Option()] = DEFAULT_SEQ_LEN,
    global_batch: Annotated[int, typer.Option()] = DEFAULT_GLOBAL_BATCH,
    precision: Annotated[str, typer.Option(help="bf16 or fp8")] = DEFAULT_PRECISION,
    calibration: Annotated[
        Path | None, typer.Option(help="model file from `calibrate fit` \\[default: the shipped one]")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(help="your run store: a file or postgresql:// URL (as `calibrate ingest --store`)"),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="your cluster's group (ingest --source) in the store")
    ] = None,
    runs: Annotated[int, typer.Option(help="most runs to propose")] = 3,
    out: Annotated[Path | None, typer.Option(help="write each run's launch files under this folder")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of tables.")
    ] = False,
) -> None:
    """Propose the few short profiling runs that most shrink the uncertainty of the recommendation."""
    from autopar.calibration.apply import load_calibration, load_default_calibration
    from autopar.calibration.planning.plan import posterior, prior_from_model, propose, short_run_steps

    if runs < 1:
        raise SpecError(f"--runs={runs}: must be >= 1")
    if group is None and store is not None:
        raise SpecError("--store has no effect without --group (the cluster whose stored runs to use)")
    cal = load_calibration(calibration) if calibration else load_default_calibration()
    problem = _problem(model, gpu, gpus, gpus_per_node, seq_len, global_batch, precision)
    setup = _candidates(cal, problem, list(dict.fromkeys(strategy)), group)
    obs_z, obs_y, n_own = _own_runs(cal, store, group)
    try:
        prior = prior_from_model(cal.corrector.band_, list(cal.corrector.offsets_.values()))
    except ValueError as e:
        raise DataError(f"--calibration {calibration or 'default'}: {e}") from None
    mean, cov = posterior(setup.z, obs_z, obs_y, prior)
    props = propose(setup.log_pred, mean, cov, prior, runs)
    doc = plan_document(setup, _bands(setup, mean, cov), props, n_own, group)
    steps = short_run_steps(1.0)[0]
    folders = [_write_launch(out, n, setup, p.index, steps) for n, p in enumerate(props, 1)] if out else []
    hint = _ingest_hint(setup, group or "mycluster", store)
    if as_json:
        emit_json({**doc, "ingest": hint, "launch_dirs": [str(f) for f in folders]})
        return
    _print_plan(doc, hint, folders)
    if out and not props:
        err_console.print(f"wrote nothing to {out}: no run proposed", highlight=False)

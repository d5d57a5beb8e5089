"""CLI command `autopar dryrun`: a few real training steps of a strategy's slice on this host's GPUs (or a
tiny model on CPU), measured against autopar's prediction, and a run record for `calibrate ingest`.

PyTorch is an optional extra: it is imported here only inside the command, after errors.require_torch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autopar.cli.app import command, console, emit_json, styled
from autopar.cli.evaluation import label_strategy
from autopar.cli.options import CLUSTER, SHAPE, Flags, OptionSpec, opt, single_problem, with_options
from autopar.errors import DataError
from autopar.files import write_atomic

# The numerical check passes when every gradient of the slice is within this relative error of the
# unsharded model's (fp32: summation order alone moves gradients by ~1e-6 of their largest element).
CHECK_TOLERANCE = 1e-3


def _fmt(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _table(rows: list[dict[str, Any]], measured_title: str) -> Table:
    t = Table(title="dry-run against autopar's prediction", title_justify="left")
    for col in ("quantity", "predicted (slice)", measured_title, "measured / predicted"):
        t.add_column(col, justify="left" if col == "quantity" else "right")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "–"
        t.add_row(r["quantity"], _fmt(r["predicted"]), _fmt(r["measured"]), ratio)
    return t


def _headline(doc: dict[str, Any]) -> list[str]:
    d, s = doc["slice"], doc["slice"]["degrees"]
    lines = [
        f"{doc['model']} · {doc['label']} · {doc['host']}",
        f"slice: stage {d['stage']} ({d['stage_layers']} layers), TP{s['tp']}{'+SP' if s['sp'] else ''} CP{s['cp']} "
        f"EP{s['ep']} DP{s['dp']}/Z{s['zero']} mb{d['micro_batch']} {s['recompute']} recompute, "
        f"{s['world']} {doc['device']} rank(s), seq {d['seq_len']}",
    ]
    if doc["device"] == "cpu":
        lines.append(
            f"CPU run of a tiny model (hidden {d['hidden']}, {d['layers']} layers, vocab {d['vocab']}): it shows the "
            "slice runs end to end; it is NOT a measurement of the strategy. 'predicted' is the real slice on "
            f"{doc['gpu']}."
        )
    return lines + [f"note: {n}" for n in doc["notes"]]


def _check(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The numerical check's verdict from every rank's result (the worst rank, gradients then weights)."""
    from autopar.dryrun.errors import DryrunFailed

    grad = max(ranks, key=lambda r: r["max_rel_grad_err"])
    weight = max(ranks, key=lambda r: r["max_rel_weight_err"])
    out = {
        "max_rel_grad_err": grad["max_rel_grad_err"],
        "worst_param": grad["worst_param"],
        "max_rel_weight_err": weight["max_rel_weight_err"],
        "worst_weight": weight["worst_weight"],
        "tolerance": CHECK_TOLERANCE,
    }
    for what, key, at in (
        ("gradient", "max_rel_grad_err", "worst_param"),
        ("weight", "max_rel_weight_err", "worst_weight"),
    ):
        if out[key] > CHECK_TOLERANCE:
            raise DryrunFailed(
                f"numerical check failed: {what} of '{out[at]}' off the unsharded model's by {out[key]:.2e} "
                f"(relative; at most {CHECK_TOLERANCE:g})"
            )
    return {**out, "passed": True}


def _host(device: str, name: str, world: int) -> str:
    if device == "cpu":
        return f"CPU ({os.cpu_count()} cores), {world} gloo processes"
    return f"{world} x {name}"


def _gpu_mismatch(device: str, name: str, gpu: str) -> list[str]:
    """A note when the host's GPU does not look like --gpu (whose figures the prediction and record use)."""
    family = gpu.split("-")[0].lower()
    if device == "cpu" or family in name.lower():
        return []
    return [
        f"the host's GPU is '{name}' but predictions and the record are for --gpu {gpu}: name the host's GPU"
    ]


def _slice_doc(plan: Any) -> dict[str, Any]:
    m = plan.model
    return {
        "stage": plan.stage,
        "stage_layers": plan.stage_model.layers,
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads or m.heads,
        "vocab": m.vocab,
        "experts": m.experts,
        "seq_len": plan.seq_len,
        "micro_batch": plan.micro_batch,
        "global_batch": plan.global_batch,
        "degrees": {**plan.degrees.__dict__, "world": plan.degrees.world},
        "strategy": plan.strategy().label(),
    }


def _run(flags: dict[str, Any], torch_version: str) -> dict[str, Any]:
    """Plan, (check,) measure, predict; the --json document."""
    from autopar.dryrun.launch import pick_device, run_ranks
    from autopar.dryrun.plan import plan_slice, tiny_plan
    from autopar.dryrun.record import comparison, predict_slice, run_record, summarize
    from autopar.perf.estimate import estimate

    model, cluster, workload = single_problem(flags)
    strategy = label_strategy(flags["strategy"], model.is_moe).with_dp(cluster.num_gpus)
    full = estimate(model, cluster, workload, strategy, strict=False)
    device, ranks = pick_device(flags["device"], flags["ranks"])
    plan = plan_slice(
        model, workload, full.strategy or strategy, ranks, device, flags["micro_batches"], flags["layers"]
    )
    pred = predict_slice(plan, cluster.gpu, workload.framework)  # before the run: a bad slice fails fast
    tasks = [("check", tiny_plan(plan))] if flags["check"] else []
    out = run_ranks(
        [*tasks, ("measure", plan)], steps=flags["steps"], warmup=flags["warmup"], timeout_s=flags["timeout"]
    )
    checked = _check([r[0] for r in out]) if flags["check"] else None
    results = [r[-1] for r in out]
    measured = summarize(plan, results)
    host = _host(device, results[0]["device_name"], plan.degrees.world)
    notes = list(plan.notes) + _gpu_mismatch(device, results[0]["device_name"], cluster.gpu.name)
    rec = run_record(
        plan,
        measured,
        model=model,
        gpu=cluster.gpu.name,
        framework=workload.framework,
        label=flags["strategy"],
        torch=torch_version,
    )
    return {
        "device": device,
        "host": host,
        "torch": torch_version,
        "model": model.name,
        "gpu": cluster.gpu.name,
        "label": flags["strategy"],
        "slice": _slice_doc(plan),
        "notes": notes,
        "measured": {**measured.__dict__, "step_times_s": [r["step_times_s"] for r in results]},
        "rows": comparison(plan, measured, pred, full),
        "check": checked,
        "record": rec,
    }


_DRYRUN: tuple[OptionSpec, ...] = (
    opt("strategy", Annotated[str, typer.Option("--strategy", help="strategy label, as optimize prints it")]),
    *("model", "gpu:one", "gpus:one", *CLUSTER, *SHAPE, "precision:one", "framework"),
    opt(
        "device", Annotated[str, typer.Option(help="auto (GPUs when PyTorch sees any), cuda or cpu")], "auto"
    ),
    opt(
        "ranks",
        Annotated[
            int | None, typer.Option(min=1, help="ranks on this host (default: every GPU; CPU: 2, at most 4)")
        ],
        None,
    ),
    opt("steps", Annotated[int, typer.Option(min=1, help="timed steps (the median is reported)")], 5),
    opt("warmup", Annotated[int, typer.Option(min=1, help="untimed steps first")], 2),
    opt("micro_batches", Annotated[int, typer.Option(min=1, help="micro-batches per optimizer step")], 1),
    opt(
        "layers",
        Annotated[
            int | None,
            typer.Option(
                min=1, help="run only this many of the stage's layers (when the slice does not fit)"
            ),
        ],
        None,
    ),
    opt(
        "check",
        Annotated[
            bool,
            typer.Option(
                "--check",
                help="first check the slice's gradients and one AdamW step against the unsharded model (fp32, "
                "tiny model)",
            ),
        ],
        False,
    ),
    opt("timeout", Annotated[float, typer.Option(min=1, help="seconds before the ranks are stopped")], 600),
    opt(
        "record",
        Annotated[
            Path | None,
            typer.Option(help="write the run record here (.csv or .jsonl) for `calibrate ingest`"),
        ],
        None,
    ),
    opt(
        "as_json",
        Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")],
        False,
    ),
)


@command("dryrun")
@with_options(*_DRYRUN)
def dryrun_cmd(f: Flags) -> None:
    """Run a few training steps of a strategy's slice on this host and compare with the prediction."""
    from autopar.dryrun.errors import require_torch

    torch_version = require_torch()
    if f.device not in ("auto", "cuda", "cpu"):
        raise DataError(f"--device '{f.device}': expected auto, cuda or cpu")
    record = f.record
    if record is not None:
        from autopar.dryrun.record import RECORD_SUFFIXES

        if record.suffix.lower() not in RECORD_SUFFIXES:
            raise DataError(f"--record '{record}': unsupported extension (use {', '.join(RECORD_SUFFIXES)})")
    doc = _run(vars(f), torch_version)
    if record is not None:
        from autopar.dryrun.record import record_text

        write_atomic(record, record_text(doc["record"], record.suffix.lower()))
        doc["record_file"] = str(record)
    if f.as_json:
        emit_json(doc)
        return
    _print(doc, record)


def _print(doc: dict[str, Any], record: Path | None) -> None:
    """The text output: the headline, the comparison table, the numerical check, the record written."""
    for line in _headline(doc):
        console.print(line, markup=False, highlight=False)
    measured_title = "measured (tiny model, CPU)" if doc["device"] == "cpu" else "measured"
    console.print(_table(doc["rows"], measured_title))
    if doc["check"]:
        console.print(
            f"numerical check: passed (largest relative error: gradients {doc['check']['max_rel_grad_err']:.1e}, "
            f"weights after one AdamW step {doc['check']['max_rel_weight_err']:.1e})"
        )
    if record is not None:
        console.print(styled(("record: ", "bold"), f"{record} (autopar calibrate ingest {record})"))

"""Recipe benchmark: does the exhaustive search's pick beat the configurations the stack's vendor tuned?

Every published, measured pre-training configuration with a full layout (NVIDIA NeMo / Megatron-Bridge
performance summaries, NeMo AutoModel, Meta's torchtitan benchmarks) is turned into its problem (model,
GPU, count, GPUs per host, sequence, global batch, precision, stack and what the record's notes state:
FP8 recipe, forced routing balance) and searched with `optimize(..., sampler="exhaustive")`, analytical
model (the default corrector's cluster offsets are the same for every layout of a problem, so they cancel
in the ratio). The recipe kept for a problem brings the options the record states (records.py: a
DeepEP/HybridEP dispatcher, and the MoE all-to-all overlap and CUDA-graph mode of the stack preset its notes
quote, stated_moe_options); a user who runs that preset types them, so the pick is searched under the same
workload. The options the record does not state (TP comm overlap; MoE overlap and CUDA graphs where no
preset is quoted) are the defaults `optimize` would use.

Per problem: the recipe (a problem with several published layouts keeps the best measured one), the
pick (fastest feasible point under the default memory margin), the predicted ratio pick/recipe, the
measured and predicted recipe throughput, and the knobs that differ. A ratio far above 1 means the
model sees a gain the vendor, who measured, did not find: a blind spot of the model, not a discovery.
Headline: median, p90, max ratio and the counts above 1.10 and 1.25, for the dev set and the held-out
set separately, and in each for tuned recipes and demonstrations apart: a page that fixed its layout to show
something else (torchtitan's 1D-to-4D and async-TP benchmarks, a platform baseline: recipes.py
DEMONSTRATION_PAGES) published a measurement, not a layout its team swept.

Measured support (calibration/planning/support.py): a pick that beats the recipe is backed where another measured
run of the same problem family (same network, GPU, precision, sequence and software as the record names it;
GPU count within two doublings, sequences per GPU within one), or of its system on another stack at a
precision no faster, ran faster per GPU than the recipe: the recipe was not the measured best there. Each
problem prints that run and its gain; the headline adds the ratios divided by that gain (the claim beyond
every measurement). The runs searched: every measured row of the published runs, the dev files,
the sweeps and bench/data/torchtitan_2024_runs.csv (torchtitan's earlier performance page: Llama-3.1-405B
without pipeline stages on 128 H100, Llama 2 and 3 on 64 A100), a source no mechanism was tuned on.

Dev (mechanisms were looked at on these): public.csv nemo_perf_summary and frontier_runs.csv
mbridge_perf_summary (pre-training rows). Held out (whole sources, looked at only at the end):
nemo_perf_summary_2504 (GB200, NeMo 25.04), nemo_automodel (FSDP2 + DeepEP) and torchtitan_bench (Meta). Issue
21's seventh session looked at all three before the issue's end, so their figures are a dev set's since. The
eighth added xtuner_megatron_moe (sweeps.csv: Pai-Megatron-Patch on 256 H800, each global batch's best measured
layout), a source no mechanism was tuned on; the tenth two NeMo AutoModel rows of a later page of its summary
(NAM-005 Llama-3.1-70B, NAM-006 GPT-OSS-20B), tuned on nothing.

Usage: python bench/recipes.py [--only SUBSTRING] [--heldout] [--csv out.csv]
       python bench/recipes.py --export autopar/data/recipes.csv   (the recipe table the tool shows beside
       its pick: every problem's recipe above, dev and held out, plus PRESETS; no search)
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autopar.calibration.evaluation.pairs import pair_record, quantile  # noqa: E402
from autopar.calibration.ingest.tables import read_run_records  # noqa: E402
from autopar.calibration.planning.recipes import Support, demonstration_of  # noqa: E402
from autopar.calibration.planning.support import MeasuredRun, recipe_support, runs_from_rows  # noqa: E402
from autopar.calibration.records.specs import row_to_specs  # noqa: E402
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu  # noqa: E402
from autopar.calibration.records.workload_spec import stated_moe_options  # noqa: E402
from autopar.data import published_runs_path  # noqa: E402
from autopar.defaults import tp_comm_overlap_default  # noqa: E402
from autopar.errors import close_hint  # noqa: E402
from autopar.perf import estimate  # noqa: E402
from autopar.search import optimize  # noqa: E402
from autopar.specs import ClusterSpec, ModelSpec, Strategy, Workload  # noqa: E402

FRONTIER = ROOT / "bench" / "data" / "frontier_runs.csv"
SWEEPS = ROOT / "bench" / "data" / "sweeps.csv"
# Measured runs searched for support only (not recipes): torchtitan's performance page before the Dec-2024
# benchmarks, and the pipeline-schedule dev runs.
SUPPORT_ONLY = (
    ROOT / "bench" / "data" / "torchtitan_2024_runs.csv",
    ROOT / "bench" / "data" / "frontier_runs_pipe.csv",
)
DEV_SOURCES = ("nemo_perf_summary", "mbridge_perf_summary")
# The ranking sweeps whose authors published the optimum they tuned (InternLM/xtuner's Megatron MoE guide,
# section "Optimal Strategy Summary": Qwen3-235B on 256 H800); the other sweeps compare options (dispatchers,
# micro-batch sizes, pipeline schedules) without calling one of them the recipe.
SWEEP_RECIPE_SOURCES = ("xtuner_megatron_moe",)
HELDOUT_SOURCES = ("nemo_perf_summary_2504", "nemo_automodel", "torchtitan_bench", *SWEEP_RECIPE_SOURCES)
# Sections of a source that are not pre-training (fine-tuning rows freeze or reuse weights).
_NOT_PRETRAINING = ("lora", "sft", "fine-tun", "finetun")
# Workload options a user types only when their stack's preset states them: set to what `autopar optimize`
# uses when the flag is not given, unless the record's notes quote a preset that states them.
_UNTYPED = ("moe_ep_overlap", "cuda_graphs")
# Strategy knobs compared between recipe and pick, in label order.
KNOBS = ("tp", "sp", "pp", "vpp", "cp", "cp_comm", "ep", "etp", "dp", "zero", "micro_batch", "recompute")
THRESHOLDS = (1.10, 1.25)

# Tuned presets published without a measurement, for problems no measured row covers (the quick-start
# problem among them). Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py:
# V1 presets (GBS 256 for 70B, 128 for 8B), sequence 8192; micro-batch not set there (the preset's default
# of 1). Columns as in RECIPE_COLUMNS.
_MB_PRESETS = "NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py"
PRESETS = (
    ("LLAMA3_70B_PRETRAIN_CONFIG_H100_BF16_V1", "Llama-3-70B", "H100-SXM", 64, "bf16", 8192, 256,
     "megatron", 4, 4, 2, 1, 5, 1, "", _MB_PRESETS, ""),
    ("LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V1", "Llama-3-70B", "H100-SXM", 64, "fp8", 8192, 256,
     "megatron", 4, 8, 1, 1, 5, 1, "", _MB_PRESETS, ""),
    ("LLAMA3_70B_PRETRAIN_CONFIG_B200_BF16_V1", "Llama-3-70B", "B200", 64, "bf16", 8192, 256,
     "megatron", 2, 4, 2, 1, 5, 1, "", _MB_PRESETS, ""),
    ("LLAMA3_8B_PRETRAIN_CONFIG_H100_BF16_V1", "Llama-3-8B", "H100-SXM", 8, "bf16", 8192, 128,
     "megatron", 1, 1, 2, 1, "", 1, "", _MB_PRESETS, ""),
)  # fmt: skip
RECIPE_COLUMNS = (
    "id", "model", "gpu", "num_gpus", "precision", "seq_len", "global_batch", "framework",
    "tp", "pp", "cp", "ep", "vpp", "micro_batch", "measured_tokens_per_s_per_gpu", "source", "recompute",
    "support_id", "support_strategy", "support_num_gpus", "support_global_batch", "support_measured",
    "support_stack",
)  # fmt: skip
NO_SUPPORT = ("", "", "", "", "", "")


@dataclass
class Problem:
    """One problem and its recipe (the best measured published layout for it)."""

    key: tuple
    source: str
    row_id: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    recipe: Strategy
    measured: float  # tokens/s/GPU of the recipe as published
    source_ref: str = ""  # where the row was published

    @property
    def heldout(self) -> bool:
        return self.source in HELDOUT_SOURCES

    @property
    def demonstration(self) -> str:
        """What the recipe's page set out to show where it fixed the layout for that (recipes.py
        DEMONSTRATION_PAGES); '' for a tuned recipe."""
        return demonstration_of(self.source_ref)


def _pretraining(row: Mapping[str, Any]) -> bool:
    where = str(row.get("source_ref") or "").lower()
    return not any(k in where for k in _NOT_PRETRAINING)


def user_workload(w: Workload, stated: Mapping[str, Any] | None = None) -> Workload:
    """The record's workload with the options a user does not type at their `autopar optimize` defaults;
    `stated` (records.stated_moe_options: what the record's stack preset states) overrides them."""
    base = Workload(seq_len=w.seq_len, global_batch=w.global_batch, framework=w.framework)
    update = {k: getattr(base, k) for k in _UNTYPED}
    update.update({k: v for k, v in (stated or {}).items() if k in _UNTYPED})
    update["tp_comm_overlap"] = tp_comm_overlap_default(w.framework)
    return w.model_copy(update=update)


@functools.cache
def _records(path: Path) -> tuple[dict[str, Any], ...]:
    """A run file's rows (blank cells ''), read once per process: the problems and the support search share
    them."""
    return tuple(read_run_records(path).fillna("").to_dict("records"))


def load_problems(only: str = "") -> list[Problem]:
    """Every pre-training problem of the recipe sources, with its best measured layout and the options
    that layout's preset states (given to the pick too)."""
    rows = [*_records(published_runs_path()), *_records(FRONTIER)]
    rows += [r for r in _records(SWEEPS) if r.get("source") in SWEEP_RECIPE_SOURCES]
    best: dict[tuple, Problem] = {}
    for row in rows:
        src = str(row.get("source") or "")
        if src not in DEV_SOURCES + HELDOUT_SOURCES or not _pretraining(row):
            continue
        if only and only.lower() not in f"{row.get('id')} {row.get('model')}".lower():
            continue
        meas = measured_tokens_per_s_per_gpu(row)[0]
        specs = row_to_specs(row)
        wl = user_workload(specs.workload, stated_moe_options(row))
        c = specs.cluster
        # keyed without the preset's options (dispatcher, MoE overlap, CUDA graphs, the recompute-modules saver
        # its stated modules allow): they come with the recipe kept, the best measured layout of the problem
        savers = tuple(x for x in wl.memory_savers if x != "recompute_modules")
        kw = user_workload(wl).model_copy(
            update={
                "moe_dispatcher": Workload.model_fields["moe_dispatcher"].default,
                "memory_savers": savers,
            }
        )
        key = (specs.model.name, c.gpu.name, c.num_gpus, c.host_size, kw.model_dump_json())
        if meas is None or (key in best and best[key].measured >= meas):
            continue
        ref = str(row.get("source_ref") or src)
        best[key] = Problem(key, src, str(row["id"]), specs.model, c, wl, specs.strategy, meas, ref)
    return list(best.values())


def measured_runs() -> list[MeasuredRun]:
    """Every measured row the support search looks at (module docstring)."""
    files = (published_runs_path(), FRONTIER, SWEEPS, *SUPPORT_ONLY)
    return [r for path in files for r in runs_from_rows(_records(path))]


def support_for(p: Problem, runs: list[MeasuredRun]) -> Support | None:
    """The measured run backing a pick that beats p's recipe (calibration/planning/support.py), or None."""
    return recipe_support(p.row_id, runs)


def recipe_rows(problems: list[Problem], runs: list[MeasuredRun]) -> list[tuple]:
    """The recipe table (RECIPE_COLUMNS): every problem's recipe with its measured support among `runs`,
    then PRESETS (published without a measurement: no support)."""
    out = []
    for p in sorted(problems, key=lambda p: p.row_id):
        s, c, w = p.recipe, p.cluster, p.workload
        sup = support_for(p, runs)
        support = (
            (sup.id, sup.strategy, sup.num_gpus, sup.global_batch, f"{sup.measured:.6g}", sup.stack)
            if sup
            else NO_SUPPORT
        )
        out.append(
            (p.row_id, p.model.name, c.gpu.name, c.num_gpus, w.precision, w.seq_len, w.global_batch,
             w.framework, s.tp, s.pp, s.cp, s.ep, s.vpp or "", s.micro_batch or "", f"{p.measured:.6g}",
             p.source_ref, s.recompute or "", *support)
        )  # fmt: skip
    return out + [(*row, *NO_SUPPORT) for row in PRESETS]


def export(path: Path) -> None:
    """Write the recipe table the tool reads (autopar/calibration/planning/recipes.py)."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as f:
        wr = csv.writer(f, lineterminator="\n")
        wr.writerow(RECIPE_COLUMNS)
        wr.writerows(recipe_rows(load_problems(), measured_runs()))
    print(f"wrote {path}")


def differing(a: Strategy, b: Strategy) -> str:
    """The knobs where b differs from a, as 'knob a->b'."""
    out = []
    for k in KNOBS:
        va, vb = getattr(a, k), getattr(b, k)
        if k == "sp" and a.tp == 1 and b.tp == 1:
            continue
        if k == "cp_comm" and a.cp == 1 and b.cp == 1:
            continue
        if va != vb:
            out.append(f"{k} {va}->{vb}")
    return ", ".join(out)


def run_problem(p: Problem, runs: list[MeasuredRun] | None = None) -> dict[str, Any]:
    """Search one problem exhaustively; the recipe and the pick estimated under the same workload, and the
    measured run among `runs` that backs a pick beating the recipe (support_for)."""
    sup = support_for(p, runs or [])
    rec = estimate(p.model, p.cluster, p.workload, p.recipe, check=False)
    res = optimize(
        p.model, p.cluster, p.workload, sampler="exhaustive", objectives=("throughput", "headroom")
    )
    fastest = next((r.trial for r in res.recommended if r.role == "fastest"), None)
    out = {
        "id": p.row_id,
        "set": "heldout" if p.heldout else "dev",
        "tuned": not p.demonstration,
        "problem": f"{p.model.name} {p.cluster.num_gpus}x{p.cluster.gpu.name} {p.workload.precision} "
        f"s{p.workload.seq_len} gb{p.workload.global_batch} {p.workload.framework}",
        "recipe": (rec.strategy or p.recipe).label(),
        "recipe_free_gib": rec.headroom_gib,
        "measured": p.measured,
        "pred_recipe": rec.tokens_per_s_per_gpu,
        "pick": "",
        "pick_free_gib": float("nan"),
        "ratio": float("nan"),
        "differs": "",
        "support": sup.sentence() if sup else "",
        "support_gain": sup.gain if sup else 1.0,
    }
    if fastest is None or fastest.estimate is None:
        out["pick"] = "(nothing feasible)"
        return out
    pick = fastest.estimate
    out["pick"] = (pick.strategy or fastest.strategy).label()
    out["pick_free_gib"] = pick.headroom_gib
    out["ratio"] = pick.tokens_per_s_per_gpu / rec.tokens_per_s_per_gpu
    out["differs"] = differing(rec.strategy or p.recipe, pick.strategy or fastest.strategy)
    return out


def headline(results: list[dict[str, Any]]) -> str:
    """Median, p90, max of pick/recipe and how many exceed each threshold."""
    r = [x["ratio"] for x in results if x["ratio"] == x["ratio"]]
    if not r:
        return "no problem evaluated"
    backed = _record_backed(r, THRESHOLDS[-1])
    return f"{_spread(r)} (the record on measured pairs holds for {backed})"


def beyond_headline(results: list[dict[str, Any]]) -> str:
    """The headline of the ratios divided by their measured support (the claim no measurement backs)."""
    r = [x["ratio"] / x["support_gain"] for x in results if x["ratio"] == x["ratio"]]
    supported = sum(x["support_gain"] > 1 for x in results if x["ratio"] == x["ratio"])
    return f"{_spread(r)} ({supported} recipe(s) not the measured best)" if r else ""


def _spread(r: list[float]) -> str:
    over = ", ".join(f">{t:.2f}: {sum(v > t for v in r)}" for t in THRESHOLDS)
    return f"n={len(r)}  median x{statistics.median(r):.3f}  p90 x{quantile(r, 0.9):.3f}  max x{max(r):.3f}  {over}"


def _record_backed(ratios: list[float], above: float) -> int:
    """How many ratios above `above` fall in a predicted-gain group whose record holds (calibration/evaluation/pairs.py)."""
    record = pair_record()
    groups = [record.for_gain(v) if record is not None else None for v in ratios if v > above]
    return sum(g is not None and g.holds for g in groups)


def _print(results: list[dict[str, Any]]) -> None:
    for x in sorted(results, key=lambda x: -x["ratio"] if x["ratio"] == x["ratio"] else 0):
        print(
            f"{x['id']:<12} {x['set']:<7} {x['problem']}\n"
            f"    recipe {x['recipe']}  (free {x['recipe_free_gib']:.1f} GiB)\n"
            f"    pick   {x['pick']}  (free {x['pick_free_gib']:.1f} GiB)\n"
            f"    pick/recipe x{x['ratio']:.3f}  recipe measured {x['measured']:,.0f}  predicted "
            f"{x['pred_recipe']:,.0f} tok/s/GPU ({x['pred_recipe'] / x['measured'] - 1:+.0%})"
            f"  differ: {x['differs'] or '-'}{_record_note(x['ratio'])}"
        )
        if x["support"]:
            print(f"    measured support: {x['support']}; beyond it x{x['ratio'] / x['support_gain']:.3f}")


def _record_note(ratio: float) -> str:
    """'; record: 20-40% holds' (the predicted gain's group on measured pairs), '' for a near-tie."""
    record = pair_record()
    group = record.for_gain(ratio) if record is not None and ratio == ratio else None
    if group is None:
        return ""
    return f"; record at {group.span()}: {'holds' if group.holds else 'verify'}"


def _no_match(only: str, matched: list[Problem]) -> str:
    """Why --only selects nothing: it names held-out problems only, or nothing (with close ids/models)."""
    if matched:
        return f"--only {only!r} matches {len(matched)} held-out problem(s) only: add --heldout"
    every = load_problems()
    names = sorted({p.row_id for p in every} | {p.model.name for p in every})
    return f"--only {only!r} matches no problem id or model{close_hint(only, names)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="problems whose row id or model contains this")
    ap.add_argument("--heldout", action="store_true", help="also run the held-out sources (look last)")
    ap.add_argument("--csv", type=Path, help="write the per-problem table here")
    ap.add_argument("--export", type=Path, help="write the recipe table (no search) and stop")
    args = ap.parse_args(argv)
    for flag, out in (("--csv", args.csv), ("--export", args.export)):
        if out is not None and not out.resolve().parent.is_dir():
            print(f"error: {flag} {out}: directory {out.resolve().parent} does not exist", file=sys.stderr)
            return 2
    if args.export:
        export(args.export)
        return 0
    t0 = time.perf_counter()
    matched = load_problems(args.only)
    probs = [p for p in matched if args.heldout or not p.heldout]
    if not probs:
        print(f"error: {_no_match(args.only, matched)}", file=sys.stderr)
        return 2
    runs = measured_runs()
    results = [run_problem(p, runs) for p in probs]
    _print(results)
    for name in ("dev", "heldout"):
        for tuned, kind in ((True, "tuned recipes"), (False, "demonstrations (layout fixed by the page)")):
            sub = [x for x in results if x["set"] == name and x["tuned"] == tuned]
            if sub:
                print(f"{name:<8} {kind}: {headline(sub)}")
                print(f"{'':<8} beyond measured support: {beyond_headline(sub)}")
    if args.csv:
        import pandas as pd

        pd.DataFrame(results).to_csv(args.csv, index=False)
    print(f"{len(results)} problems in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

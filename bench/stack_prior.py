"""The unprofiled-stack prior (autopar/calibration/models/stack_prior.py): measure it, check it on left-out sources.

Every measured source autopar holds whose stack is not Megatron (torchtitan, PyTorch FSDP / Composer, NeMo
AutoModel, Megatron-DeepSpeed, MaxText on JAX/XLA) is estimated *as if its stack were unknown*: framework cell replaced by an
unrecognised name, so the record is read with the surrogate profile (knobs.SURROGATE_PROFILE) and the
shipped calibration, as a cluster the calibration never saw (no source offset), with no prior. Each source's
median log(measured / predicted) is one draw of "how far a stack that is not tuned Megatron lands from the
tuned model". The prior is their median (offset) and standard deviation (sd).

The table checks it by leaving each source out: the prior from the other sources applied to the source's
runs, its bias (median predicted / measured), median APE and 80% band coverage, beside the same runs
estimated with their own stack profile (what autopar does for a stack it knows).

Usage: python bench/stack_prior.py [--export]   (--export writes autopar/data/stack_prior.json)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import autopar.calibration.apply.model as apply_mod
from autopar.calibration.apply import load_default_calibration
from autopar.calibration.apply.batch import calibrated_batch
from autopar.calibration.ingest.tables import read_run_records
from autopar.calibration.models.stack_prior import PRIOR_FILE, REGENERATE, StackPrior
from autopar.calibration.records.throughput import measured_tokens_per_s_per_gpu
from autopar.calibration.records.workload_spec import stack_of
from autopar.data import published_runs_path

DATA = Path(__file__).resolve().parent / "data"
DEV_FILES = (
    "frontier_runs.csv",
    "frontier_runs_pipe.csv",
    "sweeps.csv",
    "ascend_runs.csv",
    "torchtitan_2024_runs.csv",
    "weak_scaling_runs.csv",
)
# Sources that are subsets of one publication count as one (one team's stack and cluster, one draw).
SAME_PUBLICATION = {"mosaic_llmfoundry_ws": "mosaic_llmfoundry"}
PROFILED_MEGATRON = ("megatron", "megatron-legacy")
TPS = "pred_tokens_per_s_per_gpu"


def records() -> pd.DataFrame:
    """Published and dev run records whose stack is profiled and not Megatron."""
    frames = [read_run_records(published_runs_path())] + [read_run_records(DATA / f) for f in DEV_FILES]
    df = pd.concat(frames, ignore_index=True).fillna("")
    df["source"] = df["source"].replace(SAME_PUBLICATION)
    # a profiled non-Megatron stack, or a stack autopar does not profile (e.g. MaxText): not tuned Megatron
    keep = [
        "stack" in (st := stack_of(fw, [])) or st["framework"] not in PROFILED_MEGATRON
        for fw in df["framework"]
    ]
    return df[keep].reset_index(drop=True)


def predict(df: pd.DataFrame, prior: StackPrior, as_unprofiled: bool) -> pd.DataFrame:
    """Per run: source, measured, predicted and band (tokens/s/GPU) with `prior` as the shipped prior."""
    rows = df.copy()
    if as_unprofiled:  # an unrecognised stack, on a cluster the calibration never saw
        rows["framework"] = "unrecognised stack"
        rows["source"] = "unseen:" + rows["source"].astype(str)
    apply_mod.stack_prior = lambda: prior  # type: ignore[assignment]
    out = calibrated_batch(rows, load_default_calibration())
    meas = [measured_tokens_per_s_per_gpu(r)[0] for r in df.to_dict("records")]
    res = pd.DataFrame({"source": df["source"], "measured": meas})
    for col, name in ((TPS, "pred"), (TPS + "_lo", "lo"), (TPS + "_hi", "hi")):
        res[name] = pd.to_numeric(out[col], errors="coerce").to_numpy(float)
    return res[np.isfinite(res.pred) & np.isfinite(res.measured)]


def unit_offsets(res: pd.DataFrame) -> pd.Series:
    """Median log(measured / predicted) per source."""
    return np.log(res.measured / res.pred).groupby(res.source).median()


def prior_from(offsets: pd.Series) -> StackPrior:
    return StackPrior(float(offsets.median()), float(offsets.std(ddof=1)), tuple(offsets.index))


def score(res: pd.DataFrame) -> dict[str, float]:
    ratio = res.pred / res.measured
    return {
        "n": len(res),
        "bias": float(ratio.median()),
        "mdape": float((ratio - 1).abs().median()),
        "cover": float(((res.measured >= res.lo) & (res.measured <= res.hi)).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", action="store_true", help=f"write {PRIOR_FILE.name}")
    args = ap.parse_args()
    t0 = time.time()
    df = records()
    neutral = StackPrior(0.0, 0.0, ())
    raw = predict(df, neutral, True)
    offsets = unit_offsets(raw)
    prior = prior_from(offsets)
    own = predict(df, neutral, False)
    rows = []
    for src in offsets.index:
        loso = prior_from(offsets.drop(src))
        res = predict(df[df.source == src], loso, True)
        s_own, s_loso = score(own[own.source == src]), score(res)
        rows.append(
            {
                "source": src,
                "n": s_loso["n"],
                "offset": offsets[src],
                **{f"{k} own": v for k, v in s_own.items() if k != "n"},
                **{f"{k} prior(loso)": v for k, v in s_loso.items() if k != "n"},
            }
        )
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print("unprofiled-stack prior: each non-Megatron source estimated as an unknown stack; prior left out")
    print(table.round(3).to_string(index=False))
    print(
        f"\nprior over {len(offsets)} sources: offset {prior.offset:+.3f} (x{prior.factor:.3f}), "
        f"sd {prior.sd:.3f} (80% band ±{100 * math.expm1(prior.halfwidth):.0f}% added in quadrature)"
    )
    print(
        f"coverage of the left-out prior: mean over sources {table['cover prior(loso)'].mean():.2f}; "
        f"bias median {table['bias prior(loso)'].median():.3f}   ({time.time() - t0:.1f} s)"
    )
    if args.export:
        doc = {
            "generated_by": REGENERATE,
            "offset": prior.offset,
            "sd": prior.sd,
            "units": [
                {"source": s, "median_log_ratio": float(v), "runs": int((raw.source == s).sum())}
                for s, v in offsets.items()
            ],
        }
        PRIOR_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {PRIOR_FILE}")


if __name__ == "__main__":
    sys.exit(main())

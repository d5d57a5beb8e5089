"""Megatron-Core peak memory with top-8 MoE routing against what a measured sweep says fitted and what did not.

Source: InternLM/xtuner docs/en/benchmark/megatron_moe_benchmark.md (commit 79f2136), Qwen3-235B-A22B (128
experts, top-8) on 256 H800 with Pai-Megatron-Patch 2b201af (bench/data/sweeps.csv XTSW-*):
- every layout in its tables ran, so each must be predicted to fit under the margin a search uses on Megatron;
- section "TP vs PP": "if we require no recompute (recompute=select is also approximately no recompute), then
  TP must be enabled, otherwise it will exceed single-card memory": without TP and with at most the
  layernorm + moe_act recompute, no pipeline split of this model fits on 256 H800 at micro-batch 1.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from autopar.calibration.records import row_to_specs
from autopar.perf import estimate
from autopar.search.margin import band_margin
from autopar.units import GiB

ROOT = Path(__file__).resolve().parents[1]
ROWS = pd.read_csv(ROOT / "bench" / "data" / "sweeps.csv", dtype=str, keep_default_na=False)
XTUNER = ROWS[ROWS["source"] == "xtuner_megatron_moe"].to_dict("records")
MEGATRON_MARGIN = band_margin(None, 0.0, "megatron")


def test_the_sweep_is_there() -> None:
    assert len(XTUNER) == 9 and {r["gpu"] for r in XTUNER} == {"H800"}


@pytest.mark.parametrize("row", XTUNER, ids=[r["id"] for r in XTUNER])
def test_every_measured_layout_is_predicted_to_fit(row: dict) -> None:
    s = row_to_specs(row)
    if row["recompute"] == "none":  # a stated none (records read an empty cell so)
        s.strategy = s.strategy.model_copy(update={"recompute": "none"})
    est = estimate(s.model, s.cluster, s.workload, s.strategy, check=False)
    assert MEGATRON_MARGIN.need_gib(est.headroom_bytes / GiB, est.memory.total / GiB) <= 0, (
        row["id"],
        est.headroom_bytes / GiB,
    )


@pytest.mark.parametrize(("pp", "vpp"), [(8, None), (16, None), (32, None), (32, 3)])
def test_no_tp_with_select_recompute_does_not_fit(pp: int, vpp: int | None) -> None:
    s = row_to_specs(XTUNER[0])  # XTSW-2048-01: TP2 PP32v3 EP8 mb1, recompute=select
    assert s.strategy.recompute == "sel:layernorm+moe_act"
    strat = s.strategy.model_copy(
        update={"tp": 1, "sp": False, "pp": pp, "vpp": vpp, "dp": 256 // pp, "pp_schedule": None}
    )
    est = estimate(s.model, s.cluster, s.workload, strat, check=False)
    assert est.headroom_bytes < 0, (pp, vpp, est.headroom_bytes)

"""Megatron-Core peak memory with top-8 MoE routing against what a measured sweep says fitted and what did not.

Source: InternLM/xtuner docs/en/benchmark/megatron_moe_benchmark.md (commit 79f2136), Qwen3-235B-A22B (128
experts, top-8) on 256 H800 with Pai-Megatron-Patch 2b201af (bench/data/sweeps.csv XTSW-*):
- every layout in its tables ran, so each must be predicted to fit under the margin a search uses on Megatron;
- section "TP vs PP": "if we require no recompute (recompute=select is also approximately no recompute), then
  TP must be enabled, otherwise it will exceed single-card memory": without TP and with at most the
  layernorm + moe_act recompute, no pipeline split of this model fits on 256 H800 at micro-batch 1; section
  "Recomputation" then runs TP1 PP32 VPP3 with recompute=moe ("recomputing layernorm and entire moe module",
  Megatron's moe module: sel:layernorm+moe), which "can save a large amount of activation memory";
- section "PP Parallelism Setting": TP2 EP8 PP8 with recompute=select is "basically full", and "once vpp is
  enabled, it will OOM". The point estimate fits it with virtual stages (72-77 GiB of 79); the margin a search
  uses for a top-8 MoE on Megatron-Core (search/margin.py MEASURED_TOPK_MAX: the memory band's upper end) refuses
  it, and still admits every layout the guide ran.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from autopar.calibration.records.specs import row_to_specs
from autopar.perf import estimate
from autopar.search.margin import band_margin
from autopar.units import GiB

ROOT = Path(__file__).resolve().parents[2]
ROWS = pd.read_csv(ROOT / "bench" / "data" / "sweeps.csv", dtype=str, keep_default_na=False)
XTUNER = ROWS[ROWS["source"] == "xtuner_megatron_moe"].to_dict("records")
MEGATRON_MARGIN = band_margin(None, 0.0, "megatron", row_to_specs(XTUNER[0]).model)


def test_the_sweep_is_there() -> None:
    assert len(XTUNER) == 10 and {r["gpu"] for r in XTUNER} == {"H800"}


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


def test_recomputing_the_whole_moe_layer_lets_tp1_fit() -> None:
    row = next(r for r in XTUNER if r["id"] == "XTSW-2048-06")  # TP1 PP32v3 EP8 mb1, recompute=moe: ran
    s = row_to_specs(row)
    assert (s.strategy.tp, s.strategy.pp, s.strategy.vpp, s.strategy.recompute) == (
        1,
        32,
        3,
        "sel:layernorm+moe",
    )
    ran = estimate(s.model, s.cluster, s.workload, s.strategy, check=False)
    assert MEGATRON_MARGIN.need_gib(ran.headroom_bytes / GiB, ran.memory.total / GiB) <= 0
    select = s.strategy.model_copy(update={"recompute": "sel:layernorm+moe_act"})
    assert estimate(s.model, s.cluster, s.workload, select, check=False).headroom_bytes < 0


@pytest.mark.parametrize("vpp", [2, 3, 4, 6])
def test_virtual_stages_on_tp2_pp8_do_not_fit_under_the_margin(vpp: int) -> None:
    s = row_to_specs(next(r for r in XTUNER if r["id"] == "XTSW-2048-05"))  # TP2 PP8 EP8 mb1, select: ran
    assert (s.strategy.tp, s.strategy.pp, s.strategy.vpp or 1) == (2, 8, 1)
    ran = estimate(s.model, s.cluster, s.workload, s.strategy, check=False)
    assert MEGATRON_MARGIN.need_gib(ran.headroom_bytes / GiB, ran.memory.total / GiB) <= 0
    with_vpp = s.strategy.model_copy(update={"vpp": vpp, "pp_schedule": "interleaved"})
    est = estimate(s.model, s.cluster, s.workload, with_vpp, check=False)
    assert est.headroom_bytes > 0  # the point estimate alone would let it run
    assert MEGATRON_MARGIN.need_gib(est.headroom_bytes / GiB, est.memory.total / GiB) > 0, vpp


def test_the_margin_keeps_the_band_only_where_no_peak_was_measured() -> None:
    from autopar.catalog import get_model
    from autopar.search.margin import FIXED_MARGIN_GIB

    dense = band_margin(None, 0.0, "megatron", get_model("llama3.1-70b"))
    top2 = band_margin(None, 0.0, "megatron", get_model("mixtral-8x7b"))
    assert (dense.factor, dense.extra_gib) == (top2.factor, top2.extra_gib) == (1.0, FIXED_MARGIN_GIB)
    tt = band_margin(None, 0.0, "torchtitan")
    assert MEGATRON_MARGIN.factor == tt.factor > 1.1 and MEGATRON_MARGIN.extra_gib == 0.0
    assert "top-8 MoE" in MEGATRON_MARGIN.describe()
    # the FSDP stack keeps the fixed margin for the same model: NeMo AutoModel ran Qwen3-30B-A3B (top-8) at the
    # model's point estimate (NAM-003, 0.2 GiB free), so nothing says its MoE peaks run above it
    fsdp = band_margin(None, 0.0, "fsdp", row_to_specs(XTUNER[0]).model)
    assert (fsdp.factor, fsdp.extra_gib) == (1.0, FIXED_MARGIN_GIB)

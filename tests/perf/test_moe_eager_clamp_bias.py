"""GPT-OSS's clamped GLU inputs and expert biases run eagerly in Megatron-Core (perf/moe.py CLAMP_BYTES_FWD,
BIAS_BYTES_FWD; software.yaml moe_eager_clamp_bias): time, recompute and activation memory, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autopar.catalog import get_gpu, get_model
from autopar.catalog.hf import model_from_hf_config
from autopar.perf.context import perf_context
from autopar.perf.layers import layer_costs
from autopar.perf.moe import eager_clamp_bias_bytes, routed_expert_costs, routed_load
from autopar.perf.software import software_for
from autopar.specs import ClusterSpec, Workload

HF_DIR = Path(__file__).parents[1] / "data" / "hf"
OSS = get_model("GPT-OSS-120B")
PLAIN = OSS.model_copy(update={"expert_bias": False, "glu_clamp": None})
CL = ClusterSpec(gpu=get_gpu("H100-SXM"), num_gpus=8)


def _ctx(model, framework="megatron"):
    return perf_context(model, CL, Workload(seq_len=4096, global_batch=64, framework=framework))


def test_gpt_oss_states_its_expert_biases_and_clamp():
    assert (OSS.expert_bias, OSS.glu_clamp) == (True, 7.0)
    hf = model_from_hf_config(json.loads((HF_DIR / "gpt-oss-120b.json").read_text()))
    assert (hf.expert_bias, hf.glu_clamp) == (True, 7.0)
    assert (get_model("Qwen3-30B-A3B").expert_bias, get_model("Qwen3-30B-A3B").glu_clamp) == (False, None)


def test_only_megatron_runs_them_eagerly():
    assert software_for("megatron").moe_eager_clamp_bias
    assert not any(software_for(f).moe_eager_clamp_bias for f in ("torchtitan", "fsdp", "deepspeed"))


def test_bytes_per_routed_row_by_hand():
    # FC1 output 2 x 2880 = 5760, FC2 output 2880: forward 8 x 5760 + 12 x 2880 = 80,640 B, backward
    # 10 x 5760 + 12 x 2880 = 92,160 B, the clamp's forward alone 46,080 B.
    assert eager_clamp_bias_bytes(_ctx(OSS), 5760, 2880) == (80640.0, 92160.0, 46080.0)
    assert eager_clamp_bias_bytes(_ctx(OSS, "fsdp"), 5760, 2880) == (0.0, 0.0, 0.0)
    assert eager_clamp_bias_bytes(_ctx(PLAIN), 5760, 2880) == (0.0, 0.0, 0.0)


def test_routed_overheads_grow_by_the_passes_over_the_received_rows():
    ctx_o, ctx_p = _ctx(OSS), _ctx(PLAIN)
    tokens = 4096.0
    a = routed_expert_costs(ctx_o, tokens, 1, 8, 1, 3)
    b = routed_expert_costs(ctx_p, tokens, 1, 8, 1, 3)
    w = ctx_o.w
    rows = tokens * 4 * routed_load(w.moe_imbalance, w.moe_capacity_factor)  # top-4 copies, busiest rank
    hbm = ctx_o.hbm
    assert a.overhead_fwd - b.overhead_fwd == pytest.approx(rows * 80640 / hbm)
    assert a.overhead_bwd - b.overhead_bwd == pytest.approx(rows * 92160 / hbm)
    assert (a.clamp_fwd, b.clamp_fwd) == (pytest.approx(rows * 46080 / hbm), 0.0)
    assert (a.expert_fwd, a.expert_bwd, a.dispatch_combine) == (
        b.expert_fwd,
        b.expert_bwd,
        b.dispatch_combine,
    )


def test_moe_act_recompute_reruns_the_clamp_and_frees_its_copy():
    ctx_o, ctx_p = _ctx(OSS), _ctx(PLAIN)
    w = ctx_o.w
    copies = 4096 * 4 * routed_load(w.moe_imbalance, w.moe_capacity_factor)
    sel = "sel:layernorm+moe_act"
    o, p = (
        layer_costs(ctx_o, 1, 1, 1, 8, 1, False, sel, False),
        layer_costs(ctx_p, 1, 1, 1, 8, 1, False, sel, False),
    )
    assert o.moe_re - p.moe_re == pytest.approx(copies * 46080 / ctx_o.hbm)
    assert o.act_moe == pytest.approx(p.act_moe)  # the checkpoint keeps only the FC1 output
    o, p = (
        layer_costs(ctx_o, 1, 1, 1, 8, 1, False, "none", False),
        layer_costs(ctx_p, 1, 1, 1, 8, 1, False, "none", False),
    )
    assert o.moe_re == p.moe_re == 0.0
    # without the checkpoint the clamped copy (bf16, 5760 per routed row) is kept besides the FC1 output
    assert o.act_moe - p.act_moe == pytest.approx(copies * 2 * 5760)
    assert o.act_dense == p.act_dense


def test_studies_stored_before_the_fields_keep_their_fingerprint():
    # search/loops.py fingerprint: expert_bias / glu_clamp enter the model blob only when set
    from autopar.search.loops import _model_blob

    llama = _model_blob(get_model("Llama-3.1-8B"))
    assert "expert_bias" not in llama and "glu_clamp" not in llama
    assert (_model_blob(OSS)["expert_bias"], _model_blob(OSS)["glu_clamp"]) == (True, 7.0)
